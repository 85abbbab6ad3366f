package weir.peers;

import java.io.BufferedWriter;
import java.io.FileWriter;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

/**
 * Kafka Streams on the reference query (plugins/orders-error-rate/pipeline.toml), reading the
 * topic kafka_compare.py loaded.
 *
 * <ul>
 * <li>{@code windows}: event time = order_ts (the value's field, taken by a timestamp extractor
 *     from the deserialized order), 1-minute tumbling windows with a 10-minute grace
 *     ({@code TimeWindows.ofSizeAndGrace}), count(*) and errors (status "ERROR") over all
 *     events, each window emitted once, final ({@code suppress(untilWindowCloses)}). A global
 *     aggregate in Kafka Streams goes through one key: every event is re-keyed to "all" and
 *     repartitioned (a repartition topic; one task then holds the whole aggregate). The closers
 *     are held back until every partition has delivered its own ({@link #closerHold}).</li>
 * <li>{@code sessions}: per user (the record key, user_id), session windows with a 1-minute
 *     inactivity gap and a 10-minute grace (plugins/orders-error-rate/sessions.toml), count and
 *     errors per session, each session emitted once, final. No repartition: the topic is keyed
 *     by user.</li>
 * </ul>
 *
 * The input ends with one closer order per partition, far in the future: it moves every task's
 * stream time past every window of the data, so they all close. The app stops once it has seen
 * a closer on each partition and no output has come for two commit intervals and a second; it writes its rows to a
 * file and prints one JSON line with the time of the last row written.
 *
 * The final windows reach suppress when the aggregate's record cache is flushed, at a commit: so
 * the commit interval bounds how long the last windows wait after the closers (kafka_compare.py
 * passes 1 s; Kafka Streams' default is 30 s).
 *
 * <pre>StreamsApp windows|sessions BROKERS TOPIC OUT_FILE PARTITIONS CLOSER_TS THREADS APP_ID STATE_DIR GUARANTEE COMMIT_MS</pre>
 */
public final class StreamsApp {
    static final ObjectMapper JSON = new ObjectMapper().configure(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES, false);

    /** One order event, as the generator writes it. */
    public static final class Order {
        public long order_id;
        public long user_id;
        public String status;
        public double amount;
        public long order_ts;
    }

    static final Serde<Order> ORDER = Serdes.serdeFrom(
        (Serializer<Order>) (topic, o) -> {
            try {
                return o == null ? null : JSON.writeValueAsBytes(o);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        },
        (Deserializer<Order>) (topic, bytes) -> {
            try {
                return bytes == null ? null : JSON.readValue(bytes, Order.class);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        });

    /** {count, errors} as 16 bytes. */
    static final Serde<long[]> PAIR = Serdes.serdeFrom(
        (Serializer<long[]>) (topic, a) -> a == null ? null : ByteBuffer.allocate(16).putLong(a[0]).putLong(a[1]).array(),
        (Deserializer<long[]>) (topic, b) -> {
            if (b == null) {
                return null;
            }
            ByteBuffer buf = ByteBuffer.wrap(b);
            return new long[] {buf.getLong(), buf.getLong()};
        });

    /** Event time: the order's order_ts (the value is already deserialized here). */
    public static final class OrderTime implements TimestampExtractor {
        @Override
        public long extract(ConsumerRecord<Object, Object> record, long partitionTime) {
            return record.value() instanceof Order o ? o.order_ts : record.timestamp();
        }
    }

    static final AtomicLong CLOSERS = new AtomicLong();
    static final AtomicLong ROWS = new AtomicLong();
    static volatile long lastOutputMs = 0;
    static volatile long closedAtMs = 0;
    static BufferedWriter out;

    /** Passes records on, counting the closers (event time at or after closerTs). */
    static <V> FixedKeyProcessor<String, V, V> closerCounter(long closerTs, long expected) {
        return new FixedKeyProcessor<>() {
            FixedKeyProcessorContext<String, V> ctx;

            @Override
            public void init(FixedKeyProcessorContext<String, V> context) {
                ctx = context;
            }

            @Override
            public void process(FixedKeyRecord<String, V> r) {
                ctx.forward(r);
                if (r.timestamp() >= closerTs && CLOSERS.incrementAndGet() == expected) {
                    closedAtMs = System.currentTimeMillis();
                }
            }
        };
    }

    static final AtomicLong SOURCE_CLOSERS = new AtomicLong();
    static volatile long sourceClosedAtMs = 0;

    /**
     * Holds each source task's closer until every partition has delivered its own, then lets it
     * go (a wall-clock punctuation, half a second later, so that the other stream threads'
     * producers have sent what came before their closers). Without it, a closer read early from
     * one partition would move the aggregating task's stream time (the largest time it has seen,
     * over all partitions, through the repartition topic) a day ahead, and every record still to
     * come from the other partitions would be dropped as late.
     */
    static FixedKeyProcessor<String, Order, Order> closerHold(long closerTs, long expected) {
        return new FixedKeyProcessor<>() {
            FixedKeyProcessorContext<String, Order> ctx;
            FixedKeyRecord<String, Order> held;

            @Override
            public void init(FixedKeyProcessorContext<String, Order> context) {
                ctx = context;
                ctx.schedule(Duration.ofMillis(100), PunctuationType.WALL_CLOCK_TIME, now -> {
                    if (held != null && sourceClosedAtMs > 0 && now - sourceClosedAtMs >= 500) {
                        ctx.forward(held);
                        held = null;
                    }
                });
            }

            @Override
            public void process(FixedKeyRecord<String, Order> r) {
                if (r.timestamp() < closerTs) {
                    ctx.forward(r);
                    return;
                }
                held = r;
                if (SOURCE_CLOSERS.incrementAndGet() == expected) {
                    sourceClosedAtMs = System.currentTimeMillis();
                }
            }
        };
    }

    static synchronized void write(String line) {
        try {
            out.write(line);
            out.write('\n');
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        ROWS.incrementAndGet();
        lastOutputMs = System.currentTimeMillis();
    }

    static Topology windows(String topic, long closerTs, long partitions) {
        StreamsBuilder b = new StreamsBuilder();
        KStream<String, Order> orders =
            b.stream(topic, Consumed.with(Serdes.String(), ORDER).withTimestampExtractor(new OrderTime()));
        orders.processValues(() -> closerHold(closerTs, partitions))
            .map((k, o) -> KeyValue.pair("all", "ERROR".equals(o.status) ? 1 : 0))
            .repartition(Repartitioned.with(Serdes.String(), Serdes.Integer()).withName("all"))
            .processValues(() -> StreamsApp.<Integer>closerCounter(closerTs, partitions))
            .groupByKey(Grouped.with(Serdes.String(), Serdes.Integer()))
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), Duration.ofMinutes(10)))
            .aggregate(() -> new long[2], (k, err, acc) -> {
                acc[0] += 1;
                acc[1] += err;
                return acc;
            }, Materialized.with(Serdes.String(), PAIR))
            .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
            .toStream()
            .foreach((w, acc) -> write(w.window().start() + "," + acc[0] + "," + acc[1]));
        return b.build();
    }

    static Topology sessions(String topic, long closerTs, long partitions) {
        StreamsBuilder b = new StreamsBuilder();
        KStream<String, Order> orders =
            b.stream(topic, Consumed.with(Serdes.String(), ORDER).withTimestampExtractor(new OrderTime()));
        orders.processValues(() -> StreamsApp.<Order>closerCounter(closerTs, partitions))
            .groupByKey(Grouped.with(Serdes.String(), ORDER))
            .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMinutes(1), Duration.ofMinutes(10)))
            .aggregate(() -> new long[2], (k, o, acc) -> {
                acc[0] += 1;
                acc[1] += "ERROR".equals(o.status) ? 1 : 0;
                return acc;
            }, (k, a, c) -> new long[] {a[0] + c[0], a[1] + c[1]}, Materialized.with(Serdes.String(), PAIR))
            .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
            .toStream()
            .foreach((w, acc) -> write(w.key() + "," + w.window().start() + "," + w.window().end() + "," + acc[0] + "," + acc[1]));
        return b.build();
    }

    public static void main(String[] args) throws Exception {
        String query = args[0], brokers = args[1], topic = args[2], outFile = args[3];
        long partitions = Long.parseLong(args[4]);
        long closerTs = Long.parseLong(args[5]);
        String threads = args[6], appId = args[7], stateDir = args[8], guarantee = args[9];
        long commitMs = Long.parseLong(args[10]);

        out = new BufferedWriter(new FileWriter(outFile), 1 << 20);
        write(query.equals("windows") ? "window_start_ms,count,errors" : "user_id,start_ms,end_ms,count,errors");
        ROWS.set(0);
        lastOutputMs = 0;

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, String.valueOf(commitMs));
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, "1");
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        Topology t = query.equals("windows") ? windows(topic, closerTs, partitions) : sessions(topic, closerTs, partitions);

        AtomicReference<Throwable> failed = new AtomicReference<>();
        long started = System.currentTimeMillis();
        try (KafkaStreams streams = new KafkaStreams(t, p)) {
            streams.setUncaughtExceptionHandler(e -> {
                failed.compareAndSet(null, e);
                return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            streams.start();
            long deadline = started + Long.getLong("weir.peers.timeout.ms", 3_600_000L);
            while (true) {
                Thread.sleep(100);
                long now = System.currentTimeMillis();
                if (failed.get() != null || streams.state() == KafkaStreams.State.ERROR
                        || streams.state() == KafkaStreams.State.NOT_RUNNING) {
                    break;
                }
                long quiet = 2 * commitMs + 1000;
                if (closedAtMs > 0 && now - closedAtMs >= quiet && now - lastOutputMs >= quiet) {
                    break;
                }
                if (now > deadline) {
                    failed.compareAndSet(null, new IllegalStateException("timed out; closers seen: " + CLOSERS.get()));
                    break;
                }
            }
            streams.close(Duration.ofSeconds(30));
        }
        synchronized (StreamsApp.class) {
            out.close();
        }
        if (failed.get() != null) {
            failed.get().printStackTrace();
            System.exit(1);
        }
        Map<String, Object> stats = new HashMap<>();
        stats.put("rows", ROWS.get());
        stats.put("closers", CLOSERS.get());
        stats.put("started_ms", started);
        stats.put("last_output_ms", lastOutputMs);
        stats.put("closed_ms", closedAtMs);
        System.out.println(JSON.writeValueAsString(stats));
    }
}

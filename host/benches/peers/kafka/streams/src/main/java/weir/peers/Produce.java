package weir.peers;

import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Creates the topic (PARTITIONS partitions, one replica) and loads the events file into it, once, for every engine to read from the beginning:
 * one record per line, the line as value, key = user_id (as text), record timestamp = order_ts.
 * Then one "closer" order per partition (explicitly placed), far after the data, whose event time
 * closes every window of the data in engines that only end windows on event time. The
 * closer's own window is not part of the result (kafka_compare.py drops it).
 *
 * <pre>Produce BROKERS TOPIC EVENTS_FILE PARTITIONS CLOSER_TS</pre>
 * Prints one JSON line: {"records": N, "seconds": S, "per_partition": [events in each partition]}.
 */
public final class Produce {
    public static void main(String[] args) throws Exception {
        String brokers = args[0], topic = args[1], file = args[2];
        int partitions = Integer.parseInt(args[3]);
        long closerTs = Long.parseLong(args[4]);

        Properties a = new Properties();
        a.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        try (Admin admin = Admin.create(a)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
            long deadline = System.currentTimeMillis() + 60_000;
            while (true) {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                if (d.partitions().size() == partitions && d.partitions().stream().allMatch(x -> x.leader() != null)) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException(topic + " has no leaders after 60 s");
                }
                Thread.sleep(100);
            }
        }

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, "20");
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, String.valueOf(512 * 1024));
        p.put(ProducerConfig.BUFFER_MEMORY_CONFIG, String.valueOf(128L * 1024 * 1024));
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none");
        AtomicReference<Exception> failed = new AtomicReference<>();
        java.util.concurrent.atomic.AtomicLongArray perPartition = new java.util.concurrent.atomic.AtomicLongArray(partitions);
        long started = System.nanoTime();
        long n = 0;
        try (KafkaProducer<String, byte[]> producer =
                 new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer());
             BufferedReader in = new BufferedReader(
                 new InputStreamReader(new FileInputStream(file), StandardCharsets.UTF_8), 1 << 20)) {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                String user = field(line, "\"user_id\":");
                long ts = Long.parseLong(field(line, "\"order_ts\":"));
                producer.send(new ProducerRecord<>(topic, null, ts, user, line.getBytes(StandardCharsets.UTF_8)),
                    (md, e) -> {
                        if (e != null) {
                            failed.compareAndSet(null, e);
                        } else {
                            perPartition.incrementAndGet(md.partition());
                        }
                    });
                n++;
                if (failed.get() != null) {
                    throw failed.get();
                }
            }
            for (int part = 0; part < partitions; part++) {
                String closer = "{\"order_id\":0,\"user_id\":0,\"status\":\"OK\",\"amount\":0.0,\"order_ts\":" + closerTs + "}";
                producer.send(new ProducerRecord<>(topic, part, closerTs, "0", closer.getBytes(StandardCharsets.UTF_8)),
                    (md, e) -> { if (e != null) failed.compareAndSet(null, e); });
            }
            producer.flush();
        }
        if (failed.get() != null) {
            throw failed.get();
        }
        System.out.printf("{\"records\": %d, \"seconds\": %.3f, \"per_partition\": %s}%n", n,
            (System.nanoTime() - started) / 1e9, perPartition);
    }

    /** The text of a top-level number field (the generator writes no spaces). */
    static String field(String line, String name) {
        int i = line.indexOf(name);
        if (i < 0) {
            throw new IllegalArgumentException("no " + name + " in " + line);
        }
        int start = i + name.length();
        int end = start;
        while (end < line.length() && (Character.isDigit(line.charAt(end)) || line.charAt(end) == '-')) {
            end++;
        }
        return line.substring(start, end);
    }
}

package weir.peers;

import java.io.BufferedWriter;
import java.io.FileWriter;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.List;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;
import org.apache.flink.util.CloseableIterator;

/**
 * Flink SQL (Table API, a local mini cluster in this JVM) on the reference query, reading the
 * topic kafka_compare.py loaded with the Kafka connector: event time from order_ts with a
 * 10-minute watermark (per Kafka partition, the source's watermark their minimum), TUMBLE 1
 * minute, count(*) and errors. The source is bounded at the offsets that are the latest when the
 * job starts ({@code scan.bounded.mode = latest-offset}), so the job ends, with the maximum
 * watermark, and every window is final.
 *
 * <pre>FlinkJob BROKERS TOPIC OUT_CSV CUT_MS PARALLELISM GROUP_ID</pre>
 * Windows starting at or after CUT_MS (the closers') are left out. Prints one JSON line with the
 * time the last window of the data arrived.
 */
public final class FlinkJob {
    public static void main(String[] args) throws Exception {
        String brokers = args[0], topic = args[1], outFile = args[2];
        long cut = Long.parseLong(args[3]);
        int parallelism = Integer.parseInt(args[4]);
        String groupId = args[5];

        long started = System.currentTimeMillis();
        Configuration conf = new Configuration();
        conf.setString("rest.bind-port", "0");
        conf.setString("parallelism.default", String.valueOf(parallelism));
        conf.setString("pipeline.auto-watermark-interval", "200 ms");
        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
        env.setParallelism(parallelism);
        StreamTableEnvironment t = StreamTableEnvironment.create(env, EnvironmentSettings.inStreamingMode());
        t.getConfig().set("table.local-time-zone", "UTC");
        t.executeSql("CREATE TABLE orders (\n"
            + "  order_id BIGINT, user_id BIGINT, status STRING, amount DOUBLE, order_ts BIGINT,\n"
            + "  ts AS TO_TIMESTAMP_LTZ(order_ts, 3),\n"
            + "  WATERMARK FOR ts AS ts - INTERVAL '10' MINUTE\n"
            + ") WITH (\n"
            + "  'connector' = 'kafka', 'topic' = '" + topic + "',\n"
            + "  'properties.bootstrap.servers' = '" + brokers + "',\n"
            + "  'properties.group.id' = '" + groupId + "',\n"
            + "  'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',\n"
            + "  'format' = 'json'\n"
            + ")");
        long queryStarted = System.currentTimeMillis();
        TableResult result = t.executeSql(
            "SELECT window_start, COUNT(*) AS cnt, SUM(CASE WHEN status = 'ERROR' THEN 1 ELSE 0 END) AS errors\n"
            + "FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE))\n"
            + "GROUP BY window_start, window_end");
        List<long[]> rows = new ArrayList<>();
        long lastOutput = 0;
        try (CloseableIterator<Row> it = result.collect()) {
            while (it.hasNext()) {
                Row r = it.next();
                long start = millis(r.getField(0));
                if (start >= cut) {
                    continue;
                }
                rows.add(new long[] {start, ((Number) r.getField(1)).longValue(), ((Number) r.getField(2)).longValue()});
                lastOutput = System.currentTimeMillis();
            }
        }
        long ended = System.currentTimeMillis();
        rows.sort((a, b) -> Long.compare(a[0], b[0]));
        try (BufferedWriter out = new BufferedWriter(new FileWriter(outFile))) {
            out.write("window_start_ms,count,errors\n");
            for (long[] r : rows) {
                out.write(r[0] + "," + r[1] + "," + r[2] + "\n");
            }
        }
        System.out.printf("{\"rows\": %d, \"started_ms\": %d, \"query_started_ms\": %d, \"last_output_ms\": %d, \"ended_ms\": %d}%n",
            rows.size(), started, queryStarted, lastOutput, ended);
        System.exit(0);
    }

    /** window_start: a TIMESTAMP(3) in the session time zone, UTC. */
    static long millis(Object v) {
        if (v instanceof LocalDateTime l) {
            return l.toInstant(ZoneOffset.UTC).toEpochMilli();
        }
        if (v instanceof Instant i) {
            return i.toEpochMilli();
        }
        throw new IllegalArgumentException("window_start of type " + v.getClass());
    }
}

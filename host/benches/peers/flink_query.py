"""The reference query on Flink (PyFlink SQL; run by compare.py in its virtualenv).

Filesystem source over the events as one file, bounded: one split, read in file order, as
the watermark needs (parts read side by side would each hold the watermark back or drop the
others' events); event time from order_ts with a 10-minute watermark; TUMBLE 1 minute;
count(*) and errors; parallelism 2 (both cores) for the rest of the job. A bounded source
ends with the maximum watermark, so every window is final, as in the oracle.

    python flink_query.py INPUT_FILE OUT_CSV
Prints one JSON line: {"query_s": ...}.
"""
import calendar
import json
import sys
import time

from pyflink.table import EnvironmentSettings, TableEnvironment

src, out = sys.argv[1], sys.argv[2]
t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
conf = t_env.get_config()
conf.set("parallelism.default", "2")
conf.set("pipeline.auto-watermark-interval", "200 ms")
conf.set("table.local-time-zone", "UTC")
t_env.execute_sql(f"""
    CREATE TABLE orders (
        order_id BIGINT, user_id BIGINT, status STRING, amount DOUBLE, order_ts BIGINT,
        ts AS TO_TIMESTAMP_LTZ(order_ts, 3),
        WATERMARK FOR ts AS ts - INTERVAL '10' MINUTE
    ) WITH ('connector' = 'filesystem', 'path' = 'file://{src}', 'format' = 'json')
""")
started = time.time()
result = t_env.execute_sql("""
    SELECT window_start, COUNT(*) AS cnt,
           SUM(CASE WHEN status = 'ERROR' THEN 1 ELSE 0 END) AS errors
    FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(ts), INTERVAL '1' MINUTE))
    GROUP BY window_start, window_end
""")
rows = []
with result.collect() as it:
    for r in it:
        rows.append((r[0], r[1], r[2]))
query_s = time.time() - started
rows.sort()
with open(out, "w") as f:
    f.write("window_start_ms,count,errors\n")
    for ws, c, e in rows:
        # window_start is a TIMESTAMP in the session time zone, UTC.
        ms = calendar.timegm(ws.timetuple()) * 1000 + ws.microsecond // 1000
        f.write("%d,%d,%d\n" % (ms, c, e))
print(json.dumps({"query_s": query_s}))

"""The reference query on Spark Structured Streaming (run by compare.py in its virtualenv).

File source over the part files (one per micro-batch, as a stream arrives), event-time
1-minute tumbling windows on order_ts, 10-minute watermark, count(*) and errors, append mode,
trigger available-now. A last part holds one sentinel event a day after the data: its batch
moves the watermark past every real window, so they are all final (as the oracle's flush at
the end of bounded input); windows from CUT_MS on (the sentinel's) are left out.

    python spark_query.py INPUT_DIR OUT_CSV CUT_MS [--python-udf]
Prints one JSON line: {"query_s": ..., "events": ...}.

With --python-udf the error flag is a Python UDF (`status == "ERROR"`, row at a time, in
Spark's Python worker processes): PySpark's Python-UDF path, what compare.py --python measures
Weir's Python plugins against.
"""
import json
import sys
import time

from pyspark.sql import SparkSession, functions as F, types as T

src, out, cut = sys.argv[1], sys.argv[2], int(sys.argv[3])
python_udf = "--python-udf" in sys.argv[4:]
spark = (
    SparkSession.builder.master("local[2]")
    .appName("weir-peer-spark")
    .config("spark.sql.shuffle.partitions", "2")
    .config("spark.ui.enabled", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("ERROR")
schema = T.StructType([
    T.StructField("order_id", T.LongType()),
    T.StructField("user_id", T.LongType()),
    T.StructField("status", T.StringType()),
    T.StructField("amount", T.DoubleType()),
    T.StructField("order_ts", T.LongType()),
])
events = (
    spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(src)
    .withColumn("ts", F.timestamp_millis("order_ts"))
    .withWatermark("ts", "10 minutes")
)
if python_udf:
    is_error = F.udf(lambda status: 1 if status == "ERROR" else 0, T.IntegerType())
    error = is_error(F.col("status"))
else:
    error = F.when(F.col("status") == "ERROR", 1).otherwise(0)
windows = events.groupBy(F.window("ts", "1 minute")).agg(
    F.count(F.lit(1)).alias("count"),
    F.sum(error).alias("errors"),
)
rows = []


def collect(df, _batch_id):
    rows.extend(
        (int(r["window"]["start"].timestamp() * 1000), r["count"], r["errors"])
        for r in df.select("window", "count", "errors").collect()
    )


started = time.time()
q = windows.writeStream.outputMode("append").foreachBatch(collect).trigger(availableNow=True).start()
q.awaitTermination()
query_s = time.time() - started
rows.sort()
with open(out, "w") as f:
    f.write("window_start_ms,count,errors\n")
    for w, c, e in rows:
        if w < cut:
            f.write("%d,%d,%d\n" % (w, c, e))
print(json.dumps({"query_s": query_s}))
spark.stop()

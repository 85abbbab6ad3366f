#!/usr/bin/env python3
"""Reads what a Weir sink wrote with the tools people read it with, for the lakehouse tests.

  read.py parquet DIR   every row of the Parquet files under DIR (Hive-style partition
                        directories), read by DuckDB; first a line with how many rows DuckDB
                        and pyarrow's dataset reader each found, and the sum of a column by
                        pyarrow (--sum COLUMN), then each DuckDB row as a JSON object, its
                        timestamps as epoch milliseconds.

Only what tests/requirements.txt pins (duckdb, pyarrow).
"""
import argparse
import datetime
import decimal
import json
import sys


def plain(v):
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        return round(v.timestamp() * 1000)
    if isinstance(v, (datetime.date, decimal.Decimal)):
        return str(v)
    raise TypeError(f"{type(v)} has no JSON form")


def parquet(args):
    import duckdb
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    con = duckdb.connect()
    glob = f"{args.dir}/**/*.parquet".replace("'", "''")
    cur = con.execute(f"SELECT * FROM read_parquet('{glob}', hive_partitioning = true)")
    cols = [d[0] for d in cur.description]
    rows = cur.fetchall()
    table = ds.dataset(args.dir, format="parquet", partitioning="hive").to_table()
    total = pc.sum(table.column(args.sum)).as_py() if args.sum else None
    print(json.dumps({"duckdb": len(rows), "pyarrow": table.num_rows, "pyarrow_sum": total}))
    for r in rows:
        print(json.dumps(dict(zip(cols, r)), default=plain))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("parquet")
    p.add_argument("dir")
    p.add_argument("--sum")
    args = ap.parse_args()
    {"parquet": parquet}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())

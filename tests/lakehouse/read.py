#!/usr/bin/env python3
"""Reads what a Weir sink wrote with the tools people read it with, for the lakehouse tests.

  read.py parquet DIR   every row of the Parquet files under DIR (Hive-style partition
                        directories), read by DuckDB; first a line with how many rows DuckDB
                        and pyarrow's dataset reader each found, and the sum of a column by
                        pyarrow (--sum COLUMN), then each DuckDB row as a JSON object, its
                        timestamps as epoch milliseconds.
  read.py iceberg CATALOG WAREHOUSE TABLE
                        every row of the Iceberg table NAMESPACE.TABLE of the SQL catalog in
                        the SQLite file CATALOG (catalog name `weir`), read by pyiceberg; first
                        a line with how many rows pyiceberg and DuckDB's iceberg_scan each
                        found, the table's columns, and each snapshot's operation and Weir
                        delivery (its summary's weir.checkpoint and weir.batch), then each row
                        as a JSON object. With --s3-endpoint URL, the warehouse is in that
                        S3-compatible store (keys `testing`, path-style, us-east-1).

Only what tests/requirements.txt pins (duckdb and its extensions, pyarrow, pyiceberg).
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


def iceberg(args):
    import duckdb
    import duckdb_extensions
    from pyiceberg.catalog.sql import SqlCatalog

    props = {"uri": f"sqlite:///{args.catalog}", "warehouse": args.warehouse}
    if args.s3_endpoint:
        props.update({"s3.endpoint": args.s3_endpoint, "s3.access-key-id": "testing",
                      "s3.secret-access-key": "testing", "s3.region": "us-east-1",
                      "s3.path-style-access": "true"})
    table = SqlCatalog("weir", **props).load_table(args.table)
    arrow = table.scan().to_arrow()
    snapshots = []
    for s in table.snapshots():
        extra = s.summary.additional_properties if s.summary else {}
        snapshots.append({"operation": str(s.summary.operation.value) if s.summary else None,
                          "checkpoint": extra.get("weir.checkpoint"), "batch": extra.get("weir.batch")})
    con = duckdb.connect()
    con.execute(f"SET home_directory='{args.home}'")
    for ext in ["avro", "httpfs", "iceberg"]:
        duckdb_extensions.import_extension(ext, con=con)
        con.execute(f"LOAD {ext}")
    if args.s3_endpoint:
        host = args.s3_endpoint.split("://", 1)[-1]
        con.execute(f"CREATE SECRET s3 (TYPE s3, KEY_ID 'testing', SECRET 'testing', REGION 'us-east-1', "
                    f"ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false)")
    metadata = table.metadata_location.replace("'", "''")
    count = con.execute(f"SELECT count(*) FROM iceberg_scan('{metadata}')").fetchone()[0]
    columns = [f.name for f in table.schema().fields]
    print(json.dumps({"pyiceberg": arrow.num_rows, "duckdb": count, "columns": columns, "snapshots": snapshots}))
    for r in arrow.to_pylist():
        print(json.dumps(r, default=plain))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("parquet")
    p.add_argument("dir")
    p.add_argument("--sum")
    i = sub.add_parser("iceberg")
    i.add_argument("catalog")
    i.add_argument("warehouse")
    i.add_argument("table")
    i.add_argument("--s3-endpoint")
    i.add_argument("--home", default="/tmp")
    args = ap.parse_args()
    {"parquet": parquet, "iceberg": iceberg}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())

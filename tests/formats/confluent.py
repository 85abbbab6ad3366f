#!/usr/bin/env python3
"""Confluent's own Python client, as the tests' reference producer and consumer of Avro records
framed the Confluent way (magic byte 0, 4-byte big-endian schema id, Avro binary).

The Rust tests run this with the project venv's Python (`WEIR_PYTHON`, which `cargo xtask`
makes with `tests/requirements.txt`: confluent-kafka, pinned) against the Apache Kafka broker and
the schema registry they started (`tests/common/apache_kafka.rs`, `tests/common/registry.rs`). It
lets them check Weir against records written by, and read back by, the client most producers use,
rather than by Weir's own code. Only confluent_kafka and the standard library.

Subcommands (each exits nonzero, saying why, on any failure):

  produce-avro --brokers B --registry URL --topic T --schema FILE.avsc --input ROWS.jsonl
               [--subject-strategy topic|record|topic-record]
      Each line of ROWS.jsonl is one JSON object, produced as one record's value with
      `AvroSerializer` (the schema auto-registered under the strategy's subject, `T-value` by
      default), its key the row's `user_id` as a UTF-8 string if it has one (else no key).
      Prints the number of records produced once all are acknowledged.
      JSON to Avro: numbers go to int/long/float/double as the schema says; a `decimal` takes a
      JSON number or a string (read exactly, never through a float); `bytes` and `fixed` take a
      base64 string; a union takes the plain value (not Avro's `{"type": value}` wrapping), the
      first branch it fits; a missing field takes its default.

  produce-json --brokers B --registry URL --topic T --schema FILE.json --input ROWS.jsonl
  produce-protobuf --brokers B --registry URL --topic T --input ROWS.jsonl
      As produce-avro, with `JSONSerializer` (the JSON Schema in FILE.json) or
      `ProtobufSerializer` (the `shop.Order` message of tests/formats/order.proto, built at run
      time; it registers the schema as a serialized descriptor).

  produce-raw --brokers B --topic T --input FILE
      Each line of FILE is a hex string, produced as one record's value byte for byte (an empty
      line: an empty value), with no key: for corrupt-bytes and wrong-magic tests.

  decode-avro|decode-json|decode-protobuf --registry URL --topic T --input FILE
      Each line of FILE is one record's value as hex (read from T by the caller, who knows where
      the topic ends), decoded with `AvroDeserializer`, `JSONDeserializer` or
      `ProtobufDeserializer` (as `shop.Order`; fields by their `.proto` names, 64-bit integers
      as Protobuf's JSON mapping writes them: text) and printed as `consume-avro` prints it.

  consume-avro --brokers B --registry URL --topic T --count N [--timeout S]
      Reads N records from the beginning of every partition of T (read_committed: no aborted or
      open transaction's records), decodes them with `AvroDeserializer` (the writer's schema
      fetched by the id each record carries) and prints each value as one JSON line, keys sorted,
      in the order received. Avro to JSON: `decimal` as a string ("12.50"), `bytes`/`fixed` as
      base64, timestamps/dates/times as ISO 8601 strings, `uuid` as a string, a null value as
      `null`. Exits nonzero, saying how many it read, if N have not come after S seconds (60).
"""

import argparse
import base64
import datetime
import decimal
import json
import os
import sys
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
    topic_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

STRATEGIES = {
    "topic": topic_subject_name_strategy,
    "record": record_subject_name_strategy,
    "topic-record": topic_record_subject_name_strategy,
}

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def fail(message):
    sys.exit(f"confluent.py: {message}")


# --- JSON rows to the Python values fastavro writes ---------------------------------------------


class Converter:
    """Walks a parsed Avro schema beside a JSON value (numbers with fractions read as Decimal),
    giving each part the Python type fastavro expects for it."""

    def __init__(self, schema):
        self.named = {}
        self.collect(schema, None)
        self.schema = schema

    def collect(self, s, namespace):
        """Records every named type (records, enums, fixed) by short and full name."""
        if isinstance(s, list):
            for branch in s:
                self.collect(branch, namespace)
        elif isinstance(s, dict):
            kind = s.get("type")
            if kind in ("record", "error", "enum", "fixed") and "name" in s:
                name = s["name"]
                ns = s.get("namespace", namespace)
                full = name if "." in name or not ns else f"{ns}.{name}"
                self.named[full] = s
                self.named.setdefault(name.rsplit(".", 1)[-1], s)
                namespace = full.rsplit(".", 1)[0] if "." in full else ns
            if kind in ("record", "error"):
                for field in s.get("fields", []):
                    self.collect(field["type"], namespace)
            elif kind == "array":
                self.collect(s["items"], namespace)
            elif kind == "map":
                self.collect(s["values"], namespace)
            elif isinstance(kind, (dict, list)):
                self.collect(kind, namespace)

    def convert(self, s, v):
        """`v` as schema `s` wants it; ValueError if it does not fit (a union tries the next)."""
        if isinstance(s, list):
            for branch in s:
                try:
                    return self.convert(branch, v)
                except (ValueError, TypeError, decimal.InvalidOperation):
                    continue
            raise ValueError(f"{v!r} fits no branch of {s}")
        if isinstance(s, str):
            if s in PRIMITIVES:
                return self.primitive(s, None, v)
            if s not in self.named:
                raise ValueError(f"unknown type {s}")
            return self.convert(self.named[s], v)
        kind = s["type"]
        if isinstance(kind, (dict, list)):
            return self.convert(kind, v)
        if kind in ("record", "error"):
            if not isinstance(v, dict):
                raise ValueError(f"{v!r} is not an object")
            out = dict(v)
            for field in s["fields"]:
                if field["name"] in v:
                    out[field["name"]] = self.convert(field["type"], v[field["name"]])
                elif "default" in field:
                    out[field["name"]] = self.default(field["type"], field["default"])
            return out
        if kind == "array":
            if not isinstance(v, list):
                raise ValueError(f"{v!r} is not an array")
            return [self.convert(s["items"], x) for x in v]
        if kind == "map":
            if not isinstance(v, dict):
                raise ValueError(f"{v!r} is not an object")
            return {k: self.convert(s["values"], x) for k, x in v.items()}
        if kind == "enum":
            if v not in s["symbols"]:
                raise ValueError(f"{v!r} is not a symbol of {s['name']}")
            return v
        if kind == "fixed":
            b = self.primitive("bytes", s.get("logicalType"), v)
            if isinstance(b, bytes) and len(b) != s["size"]:
                raise ValueError(f"{len(b)} bytes for fixed {s['name']} of {s['size']}")
            return b
        return self.primitive(kind, s.get("logicalType"), v)

    def default(self, s, v):
        """A field's default as schema `s` wants it. Defaults are in Avro's JSON encoding, not in
        this script's: a union's is its first branch's, and bytes are ISO-8859-1 strings."""
        if isinstance(s, str) and s in self.named:
            s = self.named[s]
        if isinstance(s, list):
            return self.default(s[0], v)
        if isinstance(s, dict) and isinstance(s["type"], (dict, list)):
            return self.default(s["type"], v)
        kind = s["type"] if isinstance(s, dict) else s
        if kind in ("record", "error"):
            fields = s["fields"]
            return {f["name"]: self.default(f["type"], v.get(f["name"], f.get("default"))) for f in fields}
        if kind == "array":
            return [self.default(s["items"], x) for x in v]
        if kind == "map":
            return {k: self.default(s["values"], x) for k, x in v.items()}
        if kind in ("bytes", "fixed"):
            raw = v.encode("latin-1")
            if isinstance(s, dict) and s.get("logicalType") == "decimal":
                unscaled = int.from_bytes(raw, "big", signed=True)
                return decimal.Decimal(unscaled).scaleb(-s.get("scale", 0))
            return raw
        return self.convert(s, v)

    @staticmethod
    def primitive(kind, logical, v):
        if kind == "null":
            if v is not None:
                raise ValueError(f"{v!r} is not null")
            return None
        if v is None:
            raise ValueError(f"null for {kind}")
        if kind == "boolean":
            if not isinstance(v, bool):
                raise ValueError(f"{v!r} is not a boolean")
            return v
        if kind in ("int", "long"):
            if isinstance(v, bool) or not isinstance(v, (int, decimal.Decimal)) or v != int(v):
                raise ValueError(f"{v!r} is not an integer")
            return int(v)
        if kind in ("float", "double"):
            if isinstance(v, bool) or not isinstance(v, (int, float, decimal.Decimal)):
                raise ValueError(f"{v!r} is not a number")
            return float(v)
        if kind == "string":
            if not isinstance(v, str):
                raise ValueError(f"{v!r} is not a string")
            return v
        # bytes (or fixed)
        if logical == "decimal":
            if isinstance(v, bool) or not isinstance(v, (int, str, decimal.Decimal)):
                raise ValueError(f"{v!r} is not a decimal")
            return decimal.Decimal(str(v))
        if not isinstance(v, str):
            raise ValueError(f"{v!r} is not a base64 string")
        return base64.b64decode(v, validate=True)


def produce_avro(args):
    schema_text = open(args.schema, encoding="utf-8").read()
    converter = Converter(json.loads(schema_text))
    registry = SchemaRegistryClient({"url": args.registry})
    serializer = AvroSerializer(
        registry,
        schema_text,
        conf={"auto.register.schemas": True, "subject.name.strategy": STRATEGIES[args.subject_strategy]},
    )
    produce_rows(args, lambda row, ctx: serializer(converter.convert(converter.schema, row), ctx),
                 parse_float=decimal.Decimal)


def order_message_class():
    """The `shop.Order` message of `tests/formats/order.proto`, built at run time (the client has
    no `.proto` compiler): int64 order_id = 1, int64 user_id = 2, string status = 3,
    double amount = 4, int64 order_ts = 5, after a first message `shop.Other`."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3")
    other = fdp.message_type.add(name="Other")
    other.field.add(name="note", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING, label=1)
    order = fdp.message_type.add(name="Order")
    t = descriptor_pb2.FieldDescriptorProto
    for name, number, kind in [("order_id", 1, t.TYPE_INT64), ("user_id", 2, t.TYPE_INT64),
                               ("status", 3, t.TYPE_STRING), ("amount", 4, t.TYPE_DOUBLE),
                               ("order_ts", 5, t.TYPE_INT64)]:
        order.field.add(name=name, number=number, type=kind, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def produce_rows(args, encode, parse_float=float):
    """Produces each JSON line of `args.input` (numbers with a point read by `parse_float`),
    encoded by `encode(row, ctx)`; its key the row's `user_id`, if it has one."""
    producer = Producer({"bootstrap.servers": args.brokers, "enable.idempotence": True})
    ctx = SerializationContext(args.topic, MessageField.VALUE)
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)

    count = 0
    with open(args.input, encoding="utf-8") as rows:
        for n, line in enumerate(rows, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line, parse_float=parse_float)
                value = encode(row, ctx)
            except Exception as e:  # noqa: BLE001 - any bad row stops the run, saying which
                fail(f"{args.input}:{n}: {type(e).__name__}: {e}")
            key = str(row["user_id"]).encode() if isinstance(row, dict) and "user_id" in row else None
            produce(producer, args.topic, key, value, delivered)
            count += 1
    flush(producer, errors)
    print(count)


def produce_json(args):
    from confluent_kafka.schema_registry.json_schema import JSONSerializer

    registry = SchemaRegistryClient({"url": args.registry})
    schema_text = open(args.schema, encoding="utf-8").read()
    serializer = JSONSerializer(schema_text, registry, conf={"auto.register.schemas": True})
    produce_rows(args, serializer)


def produce_protobuf(args):
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    registry = SchemaRegistryClient({"url": args.registry})
    order = order_message_class()
    serializer = ProtobufSerializer(order, registry, {"use.deprecated.format": False, "auto.register.schemas": True})
    produce_rows(args, lambda row, ctx: serializer(order(**row), ctx))


def produce_raw(args):
    producer = Producer({"bootstrap.servers": args.brokers, "enable.idempotence": True})
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)

    count = 0
    with open(args.input, encoding="utf-8") as lines:
        for n, line in enumerate(lines, 1):
            try:
                value = bytes.fromhex(line.strip())
            except ValueError as e:
                fail(f"{args.input}:{n}: not hex: {e}")
            produce(producer, args.topic, None, value, delivered)
            count += 1
    flush(producer, errors)
    print(count)


def produce(producer, topic, key, value, on_delivery):
    while True:
        try:
            producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
            producer.poll(0)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.1)


def flush(producer, errors):
    left = producer.flush(60)
    if left:
        fail(f"{left} records were still unacknowledged after 60 s")
    if errors:
        fail(f"{len(errors)} records were not delivered, the first: {errors[0]}")


# --- Avro records to JSON lines ------------------------------------------------------------------


def json_safe(v):
    if isinstance(v, dict):
        return {str(k): json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_safe(x) for x in v]
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return base64.b64encode(v).decode("ascii")
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, uuid.UUID):
        return str(v)
    return v


def consume_avro(args):
    registry = SchemaRegistryClient({"url": args.registry})
    deserializer = AvroDeserializer(registry)
    consumer = Consumer(
        {
            "bootstrap.servers": args.brokers,
            "group.id": f"weir-confluent-py-{os.getpid()}-{time.time_ns()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    deadline = time.monotonic() + args.timeout
    ctx = SerializationContext(args.topic, MessageField.VALUE)
    read = 0
    try:
        # Every partition assigned directly, from the beginning: no group rebalance to wait for.
        while True:
            try:
                topic = consumer.list_topics(args.topic, timeout=5).topics.get(args.topic)
            except KafkaException:
                topic = None
            if topic is not None and topic.error is None and topic.partitions:
                break
            if time.monotonic() > deadline:
                fail(f"read 0 of {args.count} records: topic {args.topic} not found after {args.timeout} s")
            time.sleep(0.2)
        consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in sorted(topic.partitions)])
        while read < args.count:
            left = deadline - time.monotonic()
            if left <= 0:
                fail(f"read {read} of {args.count} records from {args.topic} in {args.timeout} s")
            msg = consumer.poll(min(left, 1.0))
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            try:
                value = deserializer(msg.value(), ctx)
            except Exception as e:  # noqa: BLE001 - say which record could not be read
                fail(f"record {msg.partition()}/{msg.offset()} of {args.topic}: {type(e).__name__}: {e}")
            print(json.dumps(json_safe(value), sort_keys=True), flush=True)
            read += 1
    finally:
        consumer.close()


def decode_avro(args):
    registry = SchemaRegistryClient({"url": args.registry})
    if args.command == "decode-json":
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        deserializer = JSONDeserializer(None, schema_registry_client=registry)
    elif args.command == "decode-protobuf":
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
        from google.protobuf.json_format import MessageToDict

        proto = ProtobufDeserializer(order_message_class(), {"use.deprecated.format": False})

        def deserializer(value, ctx):
            return MessageToDict(proto(value, ctx), preserving_proto_field_name=True,
                                 always_print_fields_with_no_presence=True)
    else:
        deserializer = AvroDeserializer(registry)
    ctx = SerializationContext(args.topic, MessageField.VALUE)
    with open(args.input, encoding="ascii") as f:
        for i, line in enumerate(f):
            try:
                value = deserializer(bytes.fromhex(line.strip()), ctx)
            except Exception as e:  # noqa: BLE001 - say which record could not be read
                fail(f"record {i}: {type(e).__name__}: {e}")
            print(json.dumps(json_safe(value), sort_keys=True), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("produce-avro")
    p.add_argument("--brokers", required=True)
    p.add_argument("--registry", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--schema", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--subject-strategy", choices=sorted(STRATEGIES), default="topic")
    p.set_defaults(run=produce_avro)

    for name, run in [("produce-json", produce_json), ("produce-protobuf", produce_protobuf)]:
        p = sub.add_parser(name)
        p.add_argument("--brokers", required=True)
        p.add_argument("--registry", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--input", required=True)
        if name == "produce-json":
            p.add_argument("--schema", required=True)
        p.set_defaults(run=run)

    p = sub.add_parser("produce-raw")
    p.add_argument("--brokers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--input", required=True)
    p.set_defaults(run=produce_raw)

    p = sub.add_parser("consume-avro")
    p.add_argument("--brokers", required=True)
    p.add_argument("--registry", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(run=consume_avro)

    for name in ["decode-avro", "decode-json", "decode-protobuf"]:
        p = sub.add_parser(name)
        p.add_argument("--registry", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--input", required=True)
        p.set_defaults(run=decode_avro)

    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()

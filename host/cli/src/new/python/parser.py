"""{{name}}: a parser. Each record is a JSON object whose `ts` is its event time (epoch ms) and
whose `user` is its key; the row is the record as it came. A record that is not such an object
is a dead letter, with the reason.

`weir build`, then `weir test pipeline.toml --events events.jsonl --expect expected.jsonl`.
"""

import weir


class {{Type}}(weir.Parser):
    def __init__(self, config):
        pass

    def parse(self, record, out):
        order = record.json()  # not JSON: a `malformed` dead letter
        if not isinstance(order, dict):
            raise weir.RecordError.malformed("a record is a JSON object")
        ts, user = order["ts"], order["user"]  # absent: a `missing-field` dead letter
        out.emit_json(ts, str(user), record.value)



class Events(weir.Parser):
    """The pipeline's parser: each record is a JSON object whose `ts` is its event time (epoch
    ms) and whose `user` is its key; the row is the record as it came. Keep it, or use the
    standard library's `json_parser.wasm` in `[parse]` instead."""

    def parse(self, record, out):
        order = record.json()
        if not isinstance(order, dict):
            raise weir.RecordError.malformed("a record is a JSON object")
        out.emit_json(order["ts"], str(order["user"]), record.value)

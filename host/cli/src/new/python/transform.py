"""{{name}}: a transform. Keeps the events whose `amount` is at least `config.min_amount`
(default 10) and passes them on unchanged; a row without a numeric `amount` is a dead letter.

`weir build`, then `weir test pipeline.toml --events events.jsonl --expect expected.jsonl`.
"""

import weir


class {{Type}}(weir.Transformer):
    def __init__(self, config):
        self.min_amount = config.get("min_amount", 10.0, type=float)

    def transform(self, event, out):
        amount = event.field("amount")
        if not isinstance(amount, (int, float)):
            raise weir.RecordError.missing_field("amount")
        if amount >= self.min_amount:
            out.emit_json(event.time, event.key, event.row)
{{events}}

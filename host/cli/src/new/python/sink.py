"""{{name}}: a sink. Writes each delivery's rows to `DIR/batch-KEY.jsonl` (`config.dir`, default
`/out`: a directory the pipeline grants), exactly once: a delivery is staged, then renamed into
place on commit, and a delivery already there is skipped when a batch is re-delivered after a
crash.

`weir build`, then `weir test pipeline.toml --events events.jsonl --expect expected.jsonl`.
"""

import os

import weir


class {{Type}}(weir.Sink):
    def __init__(self, config):
        self.dir = config.get("dir", "/out", type=str)

    def _paths(self, delivery):
        key = delivery.key()
        return f"{self.dir}/.batch-{key}.jsonl.tmp", f"{self.dir}/batch-{key}.jsonl"

    def write_batch(self, delivery, rows):
        staged, final = self._paths(delivery)
        if os.path.exists(final):
            return  # committed before a crash: the rows are the same
        with open(staged, "wb") as f:
            for row in rows:
                f.write(row + b"\n")

    def commit(self, delivery):
        staged, final = self._paths(delivery)
        if os.path.exists(final):
            return
        os.rename(staged, final)
{{events}}

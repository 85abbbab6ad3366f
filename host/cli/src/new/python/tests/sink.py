    def test_each_delivery_is_one_file(self):
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as d:
            testing.run_sink({{module}}.{{Type}}, {"dir": d}, [[{"a": 1}, {"a": 2}], [{"a": 3}]])
            files = sorted(Path(d).glob("batch-*.jsonl"))
            self.assertEqual([f.read_text() for f in files], ['{"a":1}\n{"a":2}\n', '{"a":3}\n'])

    def test_counts_and_sums(self):
        row = testing.run_aggregator({{module}}.{{Type}}, None, [testing.event(1, {"amount": 3}), testing.event(2, {"amount": 4.5})], panes=2)
        self.assertEqual(row, {"count": 2, "total": 7.5})

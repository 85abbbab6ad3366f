    def test_small_amounts_are_dropped(self):
        events, errors = testing.run_transformer({{module}}.{{Type}}, None, [(1, {"amount": 3}), (2, {"amount": 30})])
        self.assertEqual([e.time for e in events], [2])
        self.assertEqual(errors, [])

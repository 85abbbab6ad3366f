    def test_an_order_becomes_an_event_and_garbage_a_dead_letter(self):
        events, errors = testing.run_parser({{module}}.{{Type}}, None, [b'{"ts":5,"user":"ada"}', b"oops"])
        self.assertEqual([(e.time, e.key) for e in events], [(5, b"ada")])
        self.assertEqual([(e.index, e.kind) for e in errors], [(1, "malformed")])

    def test_a_running_total_and_a_timer_a_minute_on(self):
        out = testing.run_processor({{module}}.{{Type}}, None, [(1000, {"amount": 3}), (2000, {"amount": 4})], key=b"ada")
        self.assertEqual(out.rows, [(1000, {"user": "ada", "total": 3.0}), (2000, {"user": "ada", "total": 7.0})])
        self.assertEqual(out.set_timers, [Timer.event_time(61000)])

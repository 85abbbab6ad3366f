"""The fraud processor's logic, natively, through weir.testing: `python3 -m unittest` here (with
the SDK on PYTHONPATH, as guest-sdk-python's tests put it)."""

import unittest

from fraud_alerts import FraudAlerts
from weir import Timer, testing

ERR = {"status": "ERROR"}


class FraudAlertsTest(unittest.TestCase):
    def test_three_errors_within_the_window_alert_once(self):
        out = testing.run_processor(FraudAlerts, None, [(1000, ERR), (2000, {"status": "OK"}), (3000, ERR), (4000, ERR), (5000, ERR)],
                                    key=b"7")
        self.assertEqual(out.rows, [(4000, {"user": "7", "errors": 3, "first_error": 1000, "alert_at": 4000})])
        self.assertEqual(out.state, {"first": 1000, "errors": 4, "alerted": True})
        self.assertEqual(out.set_timers, [Timer.event_time(121_000)])

    def test_the_timer_ends_the_streak(self):
        state = {"first": 1000, "errors": 2, "alerted": False}
        out = testing.fire_timers(FraudAlerts, {"report_resets": True}, [Timer.event_time(121_000)], key=b"7", state=state)
        self.assertIsNone(out.state)
        self.assertEqual(out.rows, [(121_000, {"user": "7", "reset_at": 121_000, "errors": 2})])

    def test_an_error_after_the_window_starts_a_new_streak(self):
        state = {"first": 1000, "errors": 2, "alerted": False}
        out = testing.run_processor(FraudAlerts, None, [(200_000, ERR)], state=state)
        self.assertEqual(out.state, {"first": 200_000, "errors": 1, "alerted": False})
        self.assertEqual(out.delete_timers, [Timer.event_time(121_000)])
        self.assertEqual(out.set_timers, [Timer.event_time(320_000)])

    def test_a_bad_threshold_is_refused(self):
        with self.assertRaisesRegex(Exception, "threshold"):
            testing.run_processor(FraudAlerts, {"threshold": 0}, [])


if __name__ == "__main__":
    unittest.main()

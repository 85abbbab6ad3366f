"""Runs the example plugins' own unit tests (they live beside each plugin, as a plugin author's
would) as part of the SDK's."""

import importlib

import _paths  # noqa: F401


def load_tests(loader, tests, pattern):
    for name in ["test_orders_json", "test_error_rate", "test_fraud_alerts"]:
        tests.addTests(loader.loadTestsFromModule(importlib.import_module(name)))
    return tests

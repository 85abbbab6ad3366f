"""Makes the SDK (../src) and the example plugins importable when the tests run from a checkout
(`python -m unittest discover guest-sdk-python/tests`), whether or not the SDK is installed."""

import sys
from pathlib import Path

SDK = Path(__file__).resolve().parents[1]
REPO = SDK.parent
EXAMPLES = [REPO / "plugins" / d for d in ("orders-json-py", "error-rate-py", "fraud-alerts-py")]

for p in [SDK / "src", *EXAMPLES]:
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

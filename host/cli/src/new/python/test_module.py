"""Unit tests of {{name}}'s logic, natively, with the SDK's `weir.testing` (no Wasm, no host):
`python3 -m unittest` in this folder."""

import unittest

from weir import Timer, testing

import {{module}}


class {{Type}}Test(unittest.TestCase):
{{python_test}}


if __name__ == "__main__":
    unittest.main()

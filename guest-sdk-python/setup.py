"""Packages the repository's wit/plugin.wit with the SDK, so that an installed `weir.build` finds
the contract without a checkout. The WIT file stays the one definition of the contract: it is
copied at package build time, never committed under src/.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

WIT = Path(__file__).resolve().parent.parent / "wit" / "plugin.wit"


class BuildPy(build_py):
    def run(self):
        super().run()
        if not WIT.is_file():
            raise SystemExit(f"{WIT} not found: build the SDK package from a Weir checkout")
        target = Path(self.build_lib, "weir", "wit")
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(WIT, target / "plugin.wit")


setup(cmdclass={"build_py": BuildPy})

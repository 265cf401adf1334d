"""Shared fixtures for the integration tier: where the tree and the release build are."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def build_dir():
    d = pathlib.Path(os.environ.get("FP_BUILD_DIR", ROOT / "build" / "release"))
    if not (d / "build.ninja").exists():
        pytest.fail(f"no release build at {d}: run ./flowplane build first")
    return d


def run(args, **kw):
    """Run a command, capturing text output; never raises on a non-zero exit."""
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=kw.pop("timeout", 300), **kw)

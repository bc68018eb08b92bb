"""Fixtures for the lab's tests: the product tests' helpers and real vLLM CPU servers (tests/server_fixtures.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # the product tests' helper modules

from repo_paths import use_this_checkout  # noqa: E402
from workers import share_the_cores  # noqa: E402

use_this_checkout()
share_the_cores()  # before any test module imports torch

from server_fixtures import baseline_demo_server, demo_server, demo_server_factory  # noqa: E402, F401

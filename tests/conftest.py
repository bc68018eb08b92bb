"""Fixtures for tests/unit and tests/integration: the real vLLM CPU servers (server_fixtures.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # tests import shared helpers from this directory's modules

from repo_paths import use_this_checkout  # noqa: E402

use_this_checkout()

from server_fixtures import baseline_demo_server, demo_server, demo_server_factory  # noqa: E402, F401

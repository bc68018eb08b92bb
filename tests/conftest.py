"""Fixtures for tests/unit and tests/integration: the real vLLM CPU servers (server_fixtures.py)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests import shared helpers from this directory's modules

from repo_paths import use_this_checkout  # noqa: E402
from workers import share_the_cores  # noqa: E402

use_this_checkout()
share_the_cores()  # before any test module imports torch

from server_fixtures import baseline_demo_server, demo_server, demo_server_factory  # noqa: E402, F401

INTEGRATION = Path(__file__).parent / "integration"
INTEGRATION_MARKS = {"server", "slow", "realtime"}
SESSION_SERVERS = {"demo_server", "baseline_demo_server"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects anything
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/integration says why it is not a unit test (server, slow or realtime): the markers,
    not the directory, keep it out of the fast loop and select it for the full command's server phase."""
    unmarked = [
        item.nodeid
        for item in items
        if INTEGRATION in item.path.parents and not INTEGRATION_MARKS & {mark.name for mark in item.iter_markers()}
    ]
    if unmarked:
        raise pytest.UsageError(f"tests/integration tests without a server, slow or realtime marker: {unmarked}")
    # The full command's second phase hands out work units in this order (xdist's loadgroup with
    # --no-loadscope-reorder): a unit is a module, except that every module using the session's demo servers is one
    # unit, so those two servers start on one worker instead of on each. That unit first, then the other modules that
    # start vLLM servers (the longest start early), then the short wheel-reading ones to fill the end. A stable sort.
    demo = {item.path for item in items if SESSION_SERVERS & set(item.fixturenames)}
    starts_servers = {item.path for item in items if item.get_closest_marker("server")}
    items.sort(key=lambda item: (item.path not in demo, item.path not in starts_servers))
    for item in items:
        item.add_marker(pytest.mark.xdist_group("demo-servers" if item.path in demo else str(item.path)))

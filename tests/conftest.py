"""Fixtures for tests/unit and tests/integration: the real vLLM CPU servers (server_fixtures.py)."""

import ast
import functools
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
    # The full command's second phase hands out work units in this order (--no-loadscope-reorder): the one holding the
    # modules that use the session's demo servers first (see the scheduler below), then the other modules that start
    # vLLM servers (the longest start early), then the short wheel-reading ones to fill the end. A stable sort.
    starts_servers = {item.path for item in items if item.get_closest_marker("server")}
    demo = demo_modules() if any(INTEGRATION in item.path.parents for item in items) else frozenset()
    items.sort(key=lambda item: (item.path not in demo, item.path not in starts_servers))


def _uses_the_session_servers(module: Path) -> bool:
    """A test or fixture of MODULE takes the session's demo or baseline server (read, not imported: the xdist
    controller, which schedules, collects nothing)."""
    tree = ast.parse(module.read_text(encoding="utf-8"))
    functions = (node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef))
    return any(SESSION_SERVERS & {arg.arg for arg in function.args.args} for function in functions)


@functools.cache
def demo_modules() -> frozenset[Path]:
    """The integration modules that use the session's servers (read once, when a run collects integration tests)."""
    return frozenset(module for module in INTEGRATION.glob("test_*.py") if _uses_the_session_servers(module))


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """--dist loadfile, except that the modules using the session's demo servers are one unit: one worker starts
    those two servers instead of each (xdist's loadgroup would say it with marks, but its worker hook that reads them
    does not run under pytest 9.2: every test became its own unit)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    demo = {str(module.relative_to(config.rootpath)) for module in demo_modules()}

    class DemoServersTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "the session's demo servers" if scope in demo else scope

    return DemoServersTogether(config, log)  # type: ignore[arg-type]

"""The kimi-dflash plugin loads in a real vLLM CPU server (0.32) and logs its patch status (the patch floor).

Reads the log of the session's demo server (tests/conftest.py starts it through serve.sh, the one way this
project starts vLLM): the plugin runs in every vLLM process, so no server of its own is needed.
"""

from __future__ import annotations

import pytest

from serve_helpers import plugin_log_lines

pytestmark = pytest.mark.server

STATUS_LINE = "kimi-dflash patches (vLLM 0.32.0"


def test_plugin_logs_its_status_in_a_real_vllm_cpu_server(demo_server):
    output = demo_server.log_text()
    status_lines = [line for line in output.splitlines() if STATUS_LINE in line]
    assert status_lines, output[-4000:]
    # The matcher tests/test_plugin_load_server.py relies on to say "the plugin did not load" finds these lines.
    assert set(status_lines) <= set(plugin_log_lines(output))
    # vLLM runs general plugins in every process. The engine core and its workers (where the model is built, so
    # where patches matter) log the line; the API server loads plugins while parsing arguments, before vLLM 0.32
    # configures its logging.
    for line in status_lines:  # 0.32 is above the patch floor: the plugin loads nothing of the patcher
        assert "nothing to do" in line and "at or above the patch floor (vLLM 0.26.0" in line
    assert any("EngineCore" in line for line in status_lines), output[-4000:]

"""The demo start-up study's pure parts (kimi_dflash_lab.studies.demo_startup): milestones from a vLLM log, and
the verdict over starts."""

from __future__ import annotations

from datetime import datetime

from kimi_dflash_lab.studies import demo_startup

LOG = """Triton is installed, but doesn't include CPU backend. Disabling Triton.
(APIServer pid=10) INFO 11-24 04:40:39 [api_utils.py:347] version 0.32.0
(APIServer pid=10) INFO 11-24 04:40:40 [api_utils.py:286] non-default args: {}
(EngineCore pid=11) INFO 11-24 04:40:48 [runtime.py:110] kimi-dflash patches: nothing to do
(VllmWorker-0 pid=12) INFO 11-24 04:40:55 [runtime.py:110] kimi-dflash patches: nothing to do
(Worker pid=12) INFO 11-24 04:40:56 [cpu_model_runner.py:68] Starting to load model /m...
(EngineCore pid=11) INFO 11-24 04:40:59 [core.py:402] init engine (profile, create kv cache, warmup model) took 1.05 s
(APIServer pid=10) INFO 11-24 04:41:00 [entry.py:140] Starting vLLM server on http://127.0.0.1:1
"""


def test_milestones_are_seconds_after_the_start_at_the_first_matching_line() -> None:
    start = datetime(datetime.now().year, 11, 24, 4, 40, 30).timestamp()
    assert demo_startup.milestones(LOG, start) == {
        "API server imported vLLM": 9.0,
        "engine core imported vLLM": 18.0,
        "worker imported vLLM": 25.0,
        "model load starts": 26.0,
        "engine initialised": 29.0,
        "API server listening": 30.0,
    }


def test_uni_layout_has_no_worker_milestone() -> None:
    uni = "\n".join(line for line in LOG.splitlines() if "pid=12" not in line)
    assert "worker imported vLLM" not in demo_startup.milestones(uni, 0.0)


def _start(variant: str, replies: list[list[int]], error: str | None = None):
    return demo_startup.Start(variant, 1, 30.0, 25.0, (1.0, 1.0, 1.0), replies=replies, error=error)


def test_verdict_needs_every_start_served_and_identical_tokens() -> None:
    same = [_start("before", [[1, 2, 3]]), _start("after", [[1, 2, 3]])]
    lines, ok = demo_startup.summary(same)
    assert ok and any("token-identical across all starts: True" in line for line in lines)
    _, ok = demo_startup.summary([_start("before", [[1, 2, 3]]), _start("after", [[1, 2, 4]])])
    assert not ok
    _, ok = demo_startup.summary([*same, _start("after", [], error="serve.sh exited 1")])
    assert not ok

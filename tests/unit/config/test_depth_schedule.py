"""NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE: the env-file syntax, its errors (file:line, the fix), and what the plan
sends vLLM (vLLM's own format: inclusive [first, last, k] triples, v1/spec_decode/dynamic/utils.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kimi_dflash.config.depth_schedule import DepthRange, format_schedule, parse_schedule, vllm_schedule
from kimi_dflash.config.problems import ConfigError
from kimi_dflash.config.validate import load_config
from kimi_dflash.plan import build_plan
from repo_paths import CONFIGS_DIR

KEY = "NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE"


def test_the_syntax_reads_closed_single_and_open_ranges_and_writes_them_back() -> None:
    ranges = parse_schedule(" 1-4:4, 5:3 ,6-16:2,17-:1")
    assert ranges == (DepthRange(1, 4, 4), DepthRange(5, 5, 3), DepthRange(6, 16, 2), DepthRange(17, None, 1))
    assert format_schedule(ranges) == "1-4:4,5-5:3,6-16:2,17-:1"
    assert parse_schedule(format_schedule(ranges)) == ranges
    # vLLM's triples; an open last range runs to MAX_NUM_SEQS (or stands alone when it starts above it)
    assert vllm_schedule(ranges, 32) == [[1, 4, 4], [5, 5, 3], [6, 16, 2], [17, 32, 1]]
    assert vllm_schedule(parse_schedule("1-4:2,5-:1"), 3) == [[1, 4, 2], [5, 5, 1]]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1-4:4,x", "'x' is not FIRST-LAST:K"),
        ("1-4", "'1-4' is not FIRST-LAST:K"),
        ("2-:2", "'2-:2' starts at 2, not 1 (a gap)"),
        ("1-4:2,6-:1", "'6-:1' starts at 6, not 5 (a gap)"),
        ("1-4:2,3-:1", "'3-:1' starts at 3, not 5 (an overlap)"),
        ("1-:2,5-:1", "after an open range"),
        ("1-4:2,5-3:1", "'5-3:1' ends before it starts"),
        ("1-4:0,5-:1", "k must be at least 1"),
    ],
)
def test_malformed_schedules_name_the_entry(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_schedule(text)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("settings", "message", "fix"),
    [
        ({KEY: "1-4:4,5-:2"}, "k=4 above NUM_SPECULATIVE_TOKENS=2 (vLLM would clamp it, silently)", "=4"),
        ({KEY: "1-4:2,5-16:1"}, "batch sizes 17-32 (MAX_NUM_SEQS) have no range", "5-:1"),
        ({KEY: "1-4:2,5-:1", "SPECULATIVE_METHOD": "none"}, "set without speculation", "unset it"),
        ({KEY: "1-4:2,6-:1"}, "not 5 (a gap)", "1-4:4,5-16:3,17-:2"),
    ],
)
def test_bad_schedules_are_refused_with_the_file_line_and_the_fix(
    tmp_path: Path, settings: dict[str, str], message: str, fix: str
) -> None:
    config = tmp_path / "depth.env"
    config.write_text(
        f"EXTENDS={CONFIGS_DIR / 'production.env'}\n" + "".join(f"{k}={v}\n" for k, v in settings.items())
    )
    with pytest.raises(ConfigError) as caught:
        load_config(config, environ={})
    [problem] = [p for p in caught.value.problems if p.key == KEY]
    line = 1 + list(settings).index(KEY) + 1
    assert problem.source.endswith(f"depth.env:{line}"), problem.source
    assert message in problem.message and fix in problem.fix


def test_the_plan_sends_vllm_the_schedule_ending_at_max_num_seqs() -> None:
    config = load_config(CONFIGS_DIR / "production.env", environ={"NUM_SPECULATIVE_TOKENS": "3", KEY: "1-4:3,5-:1"})
    argv = list(build_plan(config, "python", "/cache").argv)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["num_speculative_tokens"] == 3
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 4, 3], [5, 32, 1]]
    plain = load_config(CONFIGS_DIR / "production.env", environ={})
    assert "num_speculative_tokens_per_batch_size" not in " ".join(build_plan(plain, "python", "/cache").argv)

"""`kimi-dflash advise --schedule`: a deeper k wins a concurrency only beyond the interval of its ratio over the
shallower choice; the choices become a schedule whose unmeasured loads get the shallower neighbour's k. Synthetic
grids (pure functions), then the verb on result files."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from kimi_dflash.advisor import cli
from kimi_dflash.advisor.schedule import Choice, choose_depths, grid_samples, schedule_of
from kimi_dflash.bench.result import RepeatResult, ServerConfig, parse_result
from kimi_dflash.config.depth_schedule import format_schedule
from kimi_dflash.core.errors import UserError
from repo_paths import REPO_ROOT

EXAMPLE = json.loads((REPO_ROOT / "docs" / "benchmark-result.example.json").read_text(encoding="utf-8"))


def _grid(rows: dict[int, dict[int, tuple[float, ...]]]) -> dict[tuple[int, int], list[float]]:
    """sessions -> k -> the aggregate tok/s of each repeat."""
    return {(k, sessions): list(values) for sessions, by_k in rows.items() for k, values in by_k.items()}


def test_a_deeper_k_wins_only_beyond_its_interval() -> None:
    grid = _grid({
        1: {1: (100, 101, 99), 2: (130, 131, 129), 4: (160, 162, 158)},  # each deeper k clearly faster
        8: {1: (400, 401, 399), 2: (404, 380, 428), 4: (300, 302, 298)},  # k=2 +1 % on average, inside its noise
        32: {1: (900, 905, 895), 2: (880, 884, 876), 4: (700, 702, 698)},  # deeper is slower
    })  # fmt: skip
    choices = {c.sessions: c for c in choose_depths(grid)}
    assert [choices[s].k for s in (1, 8, 32)] == [4, 1, 1]
    assert choices[1].over == 2 and choices[1].interval is not None and choices[1].interval.low > 1.0
    assert choices[8].over is None and choices[8].interval is None  # a 1 % lead inside the noise is a tie
    assert choices[32].output_tok_s == pytest.approx(900.0)


def test_a_deeper_k_is_compared_with_the_current_choice_not_only_its_neighbour() -> None:
    # k=2 ties k=1; k=3 beats k=1 (the choice) clearly: it is chosen over k=1
    grid = _grid({4: {1: (200, 202, 198), 2: (203, 190, 216), 3: (240, 242, 238)}})
    [choice] = choose_depths(grid)
    assert (choice.k, choice.over) == (3, 1)


def test_a_wider_confidence_keeps_a_marginal_win_shallow() -> None:
    grid = _grid({2: {1: (100, 104, 96), 2: (108, 112, 104)}})
    assert choose_depths(grid, 0.90)[0].k == 2
    assert choose_depths(grid, 0.99)[0].k == 1


def test_points_without_repeats_have_no_interval_and_are_refused() -> None:
    with pytest.raises(UserError, match=r"k=2 at 8 sessions: one measurement, no interval.*--repeats 3"):
        choose_depths(_grid({8: {1: (400, 401), 2: (450,)}}))


def test_unmeasured_loads_get_the_shallower_neighbour_and_the_last_k_runs_on() -> None:
    choices = [Choice(s, k, 1.0, None, None) for s, k in ((1, 4), (2, 4), (4, 3), (8, 2), (16, 2), (32, 1))]
    assert format_schedule(schedule_of(choices)) == "1-2:4,3-4:3,5-16:2,17-:1"
    # one concurrency measured above 1: batch sizes below it take its k; adjacent concurrencies leave no gap
    assert format_schedule(schedule_of([Choice(4, 2, 1.0, None, None)])) == "1-:2"
    assert format_schedule(schedule_of([Choice(1, 3, 1.0, None, None), Choice(2, 1, 1.0, None, None)])) == "1-1:3,2-:1"


def _result_json(k: int, sessions: int, repeats: tuple[float, ...], schedule: str | None = None) -> str:
    doc = copy.deepcopy(EXAMPLE)
    level = doc["results"][0]
    level.update(sessions=sessions, output_tok_s=sum(repeats) / len(repeats))
    doc["results"] = [level]
    result = parse_result(doc)
    rows = [RepeatResult(repeat=i, duration_s=1.0, completed=1, failed=0, output_tokens=1, output_tok_s=v)
            for i, v in enumerate(repeats)]  # fmt: skip
    result.results[0] = dataclasses.replace(result.results[0], repeat_results=rows)
    values = {"SPECULATIVE_METHOD": "dflash", "NUM_SPECULATIVE_TOKENS": str(k)}
    if schedule:
        values["NUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE"] = schedule
    config = ServerConfig(config="demo-cpu.env", overrides={"NUM_SPECULATIVE_TOKENS": str(k)}, values=values)
    return json.dumps(dataclasses.replace(result, server_config=config).to_json())


def test_the_verb_reads_repeats_from_result_files_and_prints_the_config_lines(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    points = {(1, 1): (100, 101, 99), (4, 1): (160, 161, 159), (1, 8): (400, 401, 399), (4, 8): (300, 301, 299)}
    files = []
    for (k, sessions), repeats in points.items():
        files.append(tmp_path / f"k{k}-c{sessions}.json")
        files[-1].write_text(_result_json(k, sessions, repeats), encoding="utf-8")
    scheduled = tmp_path / "scheduled.json"  # a run served with a schedule is not a fixed-k point
    scheduled.write_text(_result_json(4, 8, (999, 999, 999), schedule="1-1:4,2-:1"), encoding="utf-8")
    samples = grid_samples([(str(p), parse_result(json.loads(p.read_text()))) for p in [*files, scheduled]])
    assert samples[4, 8] == [300, 301, 299]
    assert cli.main(cli.AdviseOptions(inputs=[*files, scheduled], schedule=True)) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("NUM_SPECULATIVE_TOKENS=4\nNUM_SPECULATIVE_TOKENS_PER_BATCH_SIZE=1-1:4,2-:1"), out

"""The drafter training pipeline (train-drafter.sh): the trainable DFlash forward against the vLLM transcription,
resumable training and regen, the generated SpecForge config against SpecForge's real schema, the CLI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from repo_paths import REPO_ROOT

REPO = REPO_ROOT


DRAFT_CONFIG = REPO / "configs" / "kimi-k2.6-dflash-draft.json"


@pytest.mark.slow
def test_generated_config_speaks_specforge_0_2_0s_schema(tmp_path: Path) -> None:
    """Read SpecForge 0.2.0's pydantic schema from its wheel (package index, cached): every generated key is known,
    and a key it does not know is reported."""
    from kimi_dflash.core.wheels import download_wheel
    from kimi_dflash.drafter_training.architecture import load_architecture
    from kimi_dflash.drafter_training.specforge_config import RunSettings, run_config
    from kimi_dflash.drafter_training.specforge_schema import read_schema

    schema = read_schema(download_wheel("0.2.0", dist="specforge"))
    assert schema.version == "0.2.0" and "dflash" in schema.algorithms
    config = run_config(
        load_architecture(DRAFT_CONFIG), RunSettings("/m", tmp_path / "d", tmp_path / "t", tmp_path / "o", gpus=8)
    )
    assert schema.problems(config) == []
    config["training"]["lr"] = 1.0
    config["training"]["strategy"] = "medusa"
    problems = schema.problems(config)
    assert any("training.lr: unknown" in p for p in problems) and any("medusa" in p for p in problems)


@pytest.mark.server
def test_regen_resumes_retries_and_counts_failures(demo_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Against the real demo server: an interrupted regen keeps what finished and a rerun does only the rest; a
    prompt the server refuses (longer than the context) is counted, not retried forever."""
    from kimi_dflash.drafter_training.prompts import Prompt, demo_prompts
    from kimi_dflash.drafter_training.regen import RegenSettings, read_records, regenerate

    prompts = demo_prompts()[:6]
    too_long = Prompt("too-long", ({"role": "user", "content": "harbor " * 6000},))
    settings = RegenSettings(
        base_url=demo_server.base_url,
        model=demo_server.model,
        max_tokens=8,
        concurrency=2,
        chunk_size=1,
        retries=1,
        backoff_s=0.1,
    )
    out = tmp_path / "regen"

    async def interrupted() -> None:
        task = asyncio.create_task(regenerate(prompts, out, settings, say=lambda _: None))
        while not list(out.glob("part-*.jsonl")):
            await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupted())
    kept = {r["id"] for r in read_records(out)}
    assert 1 <= len(kept) < len(prompts)
    summary = asyncio.run(regenerate([*prompts, too_long], out, settings, say=lambda _: None))
    assert summary.already_done == len(kept) and summary.completed_this_run == len(prompts) - len(kept)
    records = list(read_records(out))
    assert sorted(r["id"] for r in records) == sorted(p.id for p in prompts)  # each once
    assert all(r["output_token_ids"] and r["prompt_token_ids"] for r in records)
    failed = [json.loads(line) for line in (out / "failed.jsonl").read_text().splitlines()]
    assert [f["id"] for f in failed] == ["too-long"] and "HTTP 400" in failed[0]["reason"]

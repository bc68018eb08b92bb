"""launch/prepare.py asks the serving Python (the `vllm` console script's interpreter) whether it has flashinfer,
on DEVICE=cuda only: without it vLLM 0.26 fails building its sampler, so the plan turns the FlashInfer sampler off
and the launcher says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kimi_dflash.config.validate import load_config
from kimi_dflash.launch.prepare import serving_python_has_flashinfer
from repo_paths import CONFIGS_DIR


def console_script(directory: Path) -> None:
    script = directory / "vllm"
    script.write_text(f"#!{sys.executable}\nprint('a vllm console script')\n")
    script.chmod(0o755)


def test_a_serving_python_without_flashinfer_gets_the_sampler_turned_off(tmp_path: Path, monkeypatch) -> None:
    console_script(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    said: list[str] = []
    config = load_config(CONFIGS_DIR / "h200.env", environ={})
    assert serving_python_has_flashinfer(config, said.append) is False
    assert said and "VLLM_USE_FLASHINFER_SAMPLER=0" in said[0] and sys.executable in said[0]


def test_a_serving_python_with_flashinfer_keeps_vllms_default(tmp_path: Path, monkeypatch) -> None:
    console_script(tmp_path)
    (tmp_path / "lib" / "flashinfer").mkdir(parents=True)
    (tmp_path / "lib" / "flashinfer" / "__init__.py").write_text("")
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))
    said: list[str] = []
    config = load_config(CONFIGS_DIR / "h200.env", environ={})
    assert serving_python_has_flashinfer(config, said.append) is True and said == []


@pytest.mark.parametrize("name", ["production.env", "demo-cpu.env"])
def test_other_devices_are_not_asked(name: str) -> None:
    said: list[str] = []
    assert serving_python_has_flashinfer(load_config(CONFIGS_DIR / name, environ={}), said.append) is None
    assert said == []

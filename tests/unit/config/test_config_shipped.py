"""Configs by name: the package ships configs/*.env (one copy in git, linked into the package)."""

from __future__ import annotations

from pathlib import Path

from kimi_dflash.config.shipped import resolve_config_argument, shipped_config_names, shipped_configs_dir
from repo_paths import CONFIGS_DIR


def test_the_package_ships_every_config_of_the_repository() -> None:
    assert shipped_config_names() == sorted(p.name for p in CONFIGS_DIR.glob("*.env"))
    for name in shipped_config_names():
        assert (shipped_configs_dir() / name).read_bytes() == (CONFIGS_DIR / name).read_bytes()


def test_a_name_means_the_shipped_config_and_a_path_means_itself(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_config_argument("demo-cpu").samefile(CONFIGS_DIR / "demo-cpu.env")
    assert resolve_config_argument("demo-cpu.env").samefile(CONFIGS_DIR / "demo-cpu.env")
    assert resolve_config_argument(None).samefile(CONFIGS_DIR / "production.env")
    (tmp_path / "demo-cpu.env").write_text("PORT=1\n")  # a file of that name here wins over the shipped one
    assert resolve_config_argument("demo-cpu.env") == Path("demo-cpu.env")
    assert resolve_config_argument("sub/none.env") == Path("sub/none.env")  # a path is never reinterpreted
    assert resolve_config_argument("no-such") == Path("no-such")  # the loader reports it, listing the names

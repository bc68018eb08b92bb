"""image_pins --verify: a pins file that cannot be read is a clear error (exit 2), never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kimi_dflash.launch import image_pins
from repo_paths import REPO_ROOT


def test_verify_of_a_missing_pins_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "pins.txt"
    assert image_pins.main(image_pins.PinsOptions(verify=missing)) == 2
    err = capsys.readouterr().err
    assert f"image_pins: pins file {missing}: no such file" in err


def test_verify_of_a_missing_pins_file_from_the_command_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kimi_dflash.launch.image_pins", "--verify", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO_ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "no such file" in result.stderr


def test_verify_passes_on_its_own_pins_and_names_a_moved_version(tmp_path: Path) -> None:
    pins_file = tmp_path / "pins.txt"
    pins_file.write_text("\n".join(image_pins.pins(image_pins.installed())) + "\nnot-a-pin\n", encoding="utf-8")
    assert image_pins.main(image_pins.PinsOptions(verify=pins_file)) == 0
    pins_file.write_text("pytest==0.0.1\n", encoding="utf-8")
    assert image_pins.main(image_pins.PinsOptions(verify=pins_file)) == 1

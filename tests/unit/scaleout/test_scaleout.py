"""Scale-out: the router launcher's command line and checks, and the Kubernetes manifests against the schemas."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kimi_dflash.scaleout.router import RouterPlan, normalise_replica, router_argv
from repo_paths import REPO_ROOT

LAUNCHER = REPO_ROOT / "launchers" / "kimi26-vllm-dflash-router.sh"
MANIFESTS = sorted((REPO_ROOT / "deploy" / "k8s").glob("*.yaml"))


def launcher(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LAUNCHER), *args],
        env={**os.environ, "KIMI_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_router_argv_lists_every_replica_with_health_checks_on_health() -> None:
    argv = router_argv(RouterPlan(replicas=("http://n1:8262", "http://n2:8262"), port=9000))
    assert argv[argv.index("--worker-urls") + 1 : argv.index("--worker-urls") + 3] == [
        "http://n1:8262",
        "http://n2:8262",
    ]
    assert argv[argv.index("--health-check-endpoint") + 1] == "/health"
    # The breaker opens before a request's 5 tries run out, so retries reach a live replica.
    assert argv[argv.index("--cb-failure-threshold") + 1] == "3"
    assert argv[argv.index("--port") + 1] == "9000" and argv[argv.index("--host") + 1] == "127.0.0.1"
    with pytest.raises(ValueError, match="listed twice"):
        router_argv(RouterPlan(replicas=("http://n1:8262", "http://n1:8262")))


@pytest.mark.parametrize(
    "url, problem",
    [
        ("n1:8262", "not an http"),
        ("http://n1:8262/v1", "has a path"),
        ("ftp://n1", "not an http"),
        ("http://n1:70000", "port must be a number 1-65535"),  # was passed on to vllm-router
        ("http://n1:0", "port must be a number 1-65535"),
        ("http://user:sk-pw-123@n1:8262", "carries credentials"),  # was printed and put on vllm-router's argv
    ],
)
def test_replica_urls_are_checked(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as refused:
        normalise_replica(url)
    assert "sk-pw" not in str(refused.value)
    assert normalise_replica("http://n1:8262/") == "http://n1:8262"


@pytest.mark.parametrize(
    "args, problem",
    [
        (["--breaker-failures", "-1"], "--breaker-failures must be >= 1"),
        (["--breaker-failures", "0"], "--breaker-failures must be >= 1"),  # was taken silently
        (["--health-failures", "0"], "--health-failures must be >= 1"),
        (["--health-interval", "0"], "--health-interval must be >= 1"),
        (["--port", "70000"], "--port must be <= 65535"),
        (["--port", "0"], "--port must be >= 1"),
        (["--health-interval", str(2**32)], "--health-interval must be <= 2147483647"),  # vllm-router: OverflowError
    ],
)
def test_router_refuses_numbers_out_of_range(args: list[str], problem: str) -> None:
    refused = launcher("--replica", "http://n1:8262", *args, "--dry-run")
    assert refused.returncode == 2 and problem in refused.stderr and "Traceback" not in refused.stderr


def test_router_launcher_help_and_dry_run() -> None:
    help_text = launcher("--help")
    assert help_text.returncode == 0 and "--replica" in help_text.stdout and "round_robin" in help_text.stdout
    dry = launcher("--replica", "http://a:1", "--replica", "http://b:2/", "--dry-run")
    assert dry.returncode == 0 and "--worker-urls http://a:1 http://b:2" in dry.stdout
    bad = launcher("--replica", "a:1")
    assert bad.returncode == 2 and "not an http(s)://host:port URL" in bad.stderr


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda path: path.name)
def test_kubernetes_manifests_validate_against_the_schemas(manifest: Path) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for document in yaml.safe_load_all(manifest.read_text()):
        kubernetes_validate.validate(document, "1.31.0", strict=True)


def test_replicas_are_probed_on_health_and_get_their_devices_and_shm() -> None:
    documents = [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text())]
    replicas = next(doc for doc in documents if doc["kind"] == "StatefulSet")
    pod = replicas["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert container["resources"]["limits"]["amd.com/gpu"] == 8
    assert {"mountPath": "/dev/shm", "name": "dshm"} in container["volumeMounts"]
    router = next(doc for doc in documents if doc["kind"] == "Deployment")
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    # The router's replica list names every replica of the StatefulSet through its headless Service.
    expected = {
        f"--replica=http://{replicas['metadata']['name']}-{i}.{replicas['spec']['serviceName']}:8262"
        for i in range(replicas["spec"]["replicas"])
    }
    assert expected <= set(args)

"""Start vllm-router (PyPI `vllm-router`, the vLLM project's Rust router) in front of replica URLs, in the
foreground: its command line from the checked URLs (launchers/kimi26-vllm-dflash-router.sh; see --help)."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from urllib.parse import urlsplit

from kimi_dflash.core.options import PORT, declare, option, run
from kimi_dflash.core.redaction import has_credentials, redact_url

# Policies of vllm-router 0.1.17 for a regular (not prefill/decode-split) deployment.
POLICIES = ("round_robin", "power_of_two", "cache_aware", "consistent_hash", "sticky_least_loaded", "random")
ROUTER_BINARY = "vllm-router"

DESCRIPTION = """\
Route OpenAI-compatible traffic over several kimi-k26-dflash replicas (one per 8-GPU node, each started with
serve.sh) through vllm-router. Requests go to healthy replicas only: every replica's /health is polled, a replica
that fails --health-failures checks in a row gets no new requests until it passes again, and one that fails
--breaker-failures requests in a row gets none for a minute. A request whose send fails is retried on another
replica (5 tries). Requests already running on a replica that dies are lost (their clients see the error);
nothing else is.

Policies: round_robin (default: even split, predictable), power_of_two (the less loaded of two random
replicas), cache_aware (same prompt prefix -> same replica: worth it only with ENABLE_PREFIX_CACHING=true),
consistent_hash / sticky_least_loaded (session affinity), random.
"""

EPILOG = """\
examples:
  launchers/kimi26-vllm-dflash-router.sh --replica http://node1:8262 --replica http://node2:8262
  launchers/kimi26-vllm-dflash-router.sh --replica http://10.0.0.11:8262 --replica http://10.0.0.12:8262 \\
      --host 0.0.0.0 --port 8000 --policy power_of_two
  curl http://127.0.0.1:8000/v1/chat/completions -H 'Content-Type: application/json' -d '{...}'

needs: pip install vllm-router (the `router` extra of this project).
"""


def normalise_replica(url: str) -> str:
    """`http(s)://host:port` without a trailing slash or path; raises ValueError naming the problem."""
    parts, shown = urlsplit(url.strip()), redact_url(url)
    if has_credentials(url):  # they would be printed and sit on vllm-router's command line (ps)
        raise ValueError(f"replica {shown!r} carries credentials (user:password@); give http(s)://host:port")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"replica {shown!r} is not an http(s)://host:port URL (e.g. http://node1:8262)")
    if parts.path not in ("", "/") or parts.query:
        raise ValueError(f"replica {shown!r} has a path; give the server root (http://host:port), not {parts.path}")
    try:
        port = parts.port
    except ValueError:  # not a number, or over 65535
        port = 0
    if port == 0:
        raise ValueError(f"replica {shown!r}: its port must be a number 1-65535")
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True, kw_only=True)
class RouterPlan:
    replicas: tuple[str, ...] | list[str] = option(
        "a replica's base URL (repeat once per replica)",
        flag="--replica",
        repeatable=True,
        required=True,
        metavar="URL",
        parse=normalise_replica,
    )
    host: str = option("address the router binds (default 127.0.0.1)", default="127.0.0.1")
    port: int = option("router port (default 8000)", default=8000, **PORT)
    policy: str = option("routing policy", choices=POLICIES, default="round_robin")
    health_interval_s: int = option("seconds between health checks (5)", flag="--health-interval", default=5, minimum=1)
    health_failures: int = option("failed checks in a row that stop a replica's traffic (2)", default=2, minimum=1)
    breaker_failures: int = option(
        "failed requests in a row that stop a replica's traffic for a minute (3: under the router's 5 tries)",
        default=3,
        minimum=1,
    )
    dry_run: bool = option("print the vllm-router command and exit")


add_cli_args = declare(RouterPlan, DESCRIPTION, EPILOG)


def router_argv(plan: RouterPlan, binary: str = ROUTER_BINARY) -> list[str]:
    if len(set(plan.replicas)) != len(plan.replicas):
        raise ValueError(f"a replica is listed twice: {', '.join(plan.replicas)}")
    flags = [
        ("--host", plan.host),
        ("--port", str(plan.port)),
        ("--policy", plan.policy),
        ("--worker-urls", *plan.replicas),
        ("--health-check-endpoint", "/health"),
        ("--health-check-interval-secs", str(plan.health_interval_s)),
        ("--health-failure-threshold", str(plan.health_failures)),
        # Below the router's 5 tries: with its own threshold (10), concurrent round-robin retries of one request can
        # all land on a dead replica before its breaker opens, and that request fails though a live replica is there.
        ("--cb-failure-threshold", str(plan.breaker_failures)),
    ]
    return [binary, *(part for flag in flags for part in flag)]


def main(plan: RouterPlan) -> int:
    try:
        # A venv's console scripts sit next to its python even when the venv is not on PATH.
        search = os.pathsep.join((os.environ.get("PATH", os.defpath), os.path.dirname(sys.executable)))
        binary = shutil.which(ROUTER_BINARY, path=search)
        argv_out = router_argv(plan, binary or ROUTER_BINARY)
    except ValueError as error:
        print(f"router: {error}", file=sys.stderr)
        return 2
    if plan.dry_run:
        print(" ".join(argv_out))
        return 0
    if binary is None:
        print("router: vllm-router is not installed; pip install vllm-router (or '.[router]')", file=sys.stderr)
        return 1
    listening = f"listening on http://{plan.host}:{plan.port}"
    print(f"router: {len(plan.replicas)} replica(s), policy {plan.policy}, {listening}", file=sys.stderr, flush=True)
    os.execv(argv_out[0], argv_out)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(run(__name__, prog="kimi26-vllm-dflash-router.sh"))

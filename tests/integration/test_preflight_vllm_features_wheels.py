"""vLLM feature probes read from source: a small fabricated tree for every shape the reader handles, the
installed vLLM CPU build for real, and (slow) released wheels and vLLM's own runtime objects as the referee."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.rules.features import INTRODUCED_IN, KINDS, probe_features
from kimi_dflash.rules.source import VllmSource


def states(source: VllmSource, names) -> dict[str, str]:
    return {o.name: o.state for o in probe_features(source, tuple(names))}


installed = package_dir()


needs_installed_vllm = pytest.mark.skipif(installed is None, reason="vLLM is not installed in this Python")


# The referee: vLLM's own runtime objects (the real CLI parser, the real Literal and dataclass), computed in a
# child process because importing vllm.config and building the parser takes tens of seconds.
RUNTIME_REFEREE = """
import dataclasses, json, typing
from vllm.config import SpeculativeConfig
from vllm.config.speculative import SpeculativeMethod
from vllm.config.kernel import MoEBackend
from vllm.config.cache import CacheDType
import vllm.envs
from vllm.v1.attention.backends.registry import AttentionBackendEnum
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = make_arg_parser(FlexibleArgumentParser())
print("REFEREE " + json.dumps({
    "speculative_method": list(typing.get_args(SpeculativeMethod)),
    "speculative_config": [f.name for f in dataclasses.fields(SpeculativeConfig)],
    "moe_backend": list(typing.get_args(MoEBackend)),
    "kv_cache_dtype": list(typing.get_args(CacheDType)),
    "env": list(vllm.envs.environment_variables),
    "attention_backend": [m.name for m in AttentionBackendEnum],
    "cli": [o for o in parser._option_string_actions if o.startswith("--")],
}))
"""


@pytest.mark.slow
@needs_installed_vllm
def test_static_reading_matches_vllms_runtime_objects(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", RUNTIME_REFEREE], capture_output=True, text=True, timeout=900, cwd=tmp_path, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("REFEREE ")]
    assert lines, f"referee failed ({done.returncode}): {done.stderr[-2000:]}"
    runtime = json.loads(lines[-1][len("REFEREE ") :])
    source = VllmSource.from_package_dir(installed)
    for kind, values in runtime.items():
        static = set(KINDS[kind][1](source)[0])
        if kind == "cli":  # the static list leaves "--no-x" to the probe's BooleanOptionalAction rule
            assert static <= set(values)
            derived = set(values) - static
            assert all(v.startswith("--no-") and f"--{v[len('--no-') :]}" in static for v in derived), derived
            outcomes = probe_features(source, tuple(f"cli:{v}" for v in sorted(derived)))
            assert {o.state for o in outcomes} <= {"present"}
        else:
            assert static == set(values), kind


@pytest.mark.slow
@pytest.mark.parametrize(
    "version, present, absent",
    [
        ("0.19.1", [], ["speculative_method:dflash", "speculative_config.attention_backend"]),
        ("0.20.0", ["speculative_method:dflash"], ["speculative_config.attention_backend"]),
        (
            "0.21.0",
            ["speculative_method:dflash", "speculative_config.attention_backend"],
            ["speculative_config.kv_cache_dtype"],
        ),
    ],
)
def test_released_wheels_confirm_where_features_arrived(version, present, absent):
    from kimi_dflash_lab.wheels import source_wheel

    source = VllmSource.from_wheel(source_wheel(version))
    found = states(source, present + absent + ["cli:--language-model-only"])
    assert found == {
        **{n: "present" for n in present},
        **{n: "absent" for n in absent},
        "cli:--language-model-only": "present",
    }
    for name in absent:  # the release that lacks a feature is exactly where INTRODUCED_IN says it came later
        assert name in INTRODUCED_IN

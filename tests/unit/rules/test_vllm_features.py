"""vLLM feature probes read from source: a small fabricated tree for every shape the reader handles, the
installed vLLM CPU build for real, and (slow) released wheels and vLLM's own runtime objects as the referee."""

from __future__ import annotations

import textwrap
import zipfile
from pathlib import Path

import pytest

from kimi_dflash.patcher.floor import package_dir
from kimi_dflash.rules import source as source_module
from kimi_dflash.rules.features import INTRODUCED_IN, parse_feature, probe_features
from kimi_dflash.rules.source import VllmSource

# A made-up miniature of the places vLLM keeps what the probes read (not vLLM code: just the same shapes).
MINI_VLLM = {
    "vllm/__init__.py": "",
    "vllm/config/__init__.py": "from vllm.config.speculative import SpeculativeConfig  # re-export\n",
    "vllm/config/mtp.py": 'from typing import Literal\nMTPTypes = Literal["deepseek_mtp", "mtp"]\n',
    "vllm/config/speculative.py": """
        import typing
        from typing import ClassVar, Literal
        from .mtp import MTPTypes

        # SpeculativeMethod is documented below; this comment must not count as its definition.
        DFlashTypes = Literal["dflash"]
        SpeculativeMethod = Literal["ngram", MTPTypes, DFlashTypes] | typing.Literal["suffix"]

        class _Common:
            model: str | None = None

        class SpeculativeConfig(_Common):
            method: SpeculativeMethod | None = None
            attention_backend: str | None = None
            registry: ClassVar[dict] = {}

            def helper(self):
                local_only: int = 3
                return local_only
    """,
    "vllm/config/kernel.py": 'from typing import Literal\nMoEBackend = Literal["auto", "triton", "aiter"]\n',
    "vllm/config/cache.py": 'from typing import Literal\nCacheDType = Literal["auto", "fp8", "fp8_e4m3"]\n',
    "vllm/envs.py": """
        environment_variables: dict = {
            "VLLM_ROCM_USE_AITER": lambda: False,
            "VLLM_PLUGINS": lambda: None,
        }
    """,
    "vllm/engine/arg_utils.py": """
        class EngineArgs:
            language_model_only: bool = False

            @staticmethod
            def add_cli_args(parser):
                parser.add_argument("--language-model-only", action="store_true")
                parser.add_argument("--enable-prefix-caching", action="store_true")
                parser.add_argument("--speculative-config", type=str, help="a JSON --like string")
                return parser
    """,
    "vllm/entrypoints/openai/cli_args.py": """
        class BaseFrontendArgs:
            tool_call_parser: str | None = None
            enable_auto_tool_choice: bool = False

        class FrontendArgs(BaseFrontendArgs):
            port: int = 8000

        def make_arg_parser(parser):
            parser.add_argument("--headless", action="store_true")
    """,
    "vllm/v1/attention/backends/registry.py": """
        from enum import Enum

        class AttentionBackendEnum(Enum):
            TRITON_ATTN = "vllm.v1.attention.backends.triton_attn.TritonAttentionBackend"
            ROCM_AITER_MLA = "vllm.v1.attention.backends.mla.rocm_aiter_mla.AiterMLABackend"
            _private = "ignored"
    """,
}


EXPECTED = {
    "speculative_method:dflash": "present",
    "speculative_method:deepseek_mtp": "present",  # through an alias imported from a sibling module
    "speculative_method:suffix": "present",  # through `A | typing.Literal[...]`
    "speculative_method:eagle3": "absent",
    "speculative_config.attention_backend": "present",
    "speculative_config.model": "present",  # inherited field
    "speculative_config.kv_cache_dtype": "absent",
    "speculative_config.registry": "absent",  # ClassVar, not a field
    "speculative_config.local_only": "absent",  # a local in a method, not a field
    "cli:--language-model-only": "present",
    "cli:--no-enable-prefix-caching": "present",  # argparse BooleanOptionalAction's negation
    "cli:--tool-call-parser": "present",  # frontend dataclass field of a base class
    "cli:--port": "present",
    "cli:--headless": "present",
    "cli:--like": "absent",  # only inside a help string
    "cli:--moe-backend": "absent",
    "env:VLLM_ROCM_USE_AITER": "present",
    "env:VLLM_ROCM_USE_AITER_MLA": "absent",
    "moe_backend:aiter": "present",
    "moe_backend:flydsl": "absent",
    "kv_cache_dtype:fp8_e4m3": "present",
    "attention_backend:ROCM_AITER_MLA": "present",
    "attention_backend:_private": "absent",
    "attention_backend:FLASHMLA": "absent",
}


# What the recipe's plans ask of vLLM; the CPU build 0.32.0 installed for the demo and the tests has them all.
RECIPE_FEATURES = (
    "speculative_method:dflash",
    "speculative_config.attention_backend",
    "speculative_config.kv_cache_dtype",
    "speculative_config.moe_backend",
    "cli:--language-model-only",
    "cli:--moe-backend",
    "cli:--mm-encoder-tp-mode",
    "cli:--tool-call-parser",
    "cli:--enable-auto-tool-choice",
    "cli:--reasoning-parser",
    "cli:--speculative-config",
    "cli:--no-enable-prefix-caching",
    "env:VLLM_ROCM_USE_AITER",
    "env:VLLM_ROCM_QUICK_REDUCE_QUANTIZATION",
    "env:VLLM_PLUGINS",
    "moe_backend:aiter",
    "kv_cache_dtype:fp8_e4m3",
    "attention_backend:TRITON_ATTN",
    "attention_backend:ROCM_AITER_MLA",
)


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for relpath, text in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root / "vllm"


def states(source: VllmSource, names) -> dict[str, str]:
    return {o.name: o.state for o in probe_features(source, tuple(names))}


def test_every_shape_in_a_source_tree(tmp_path):
    source = VllmSource.from_package_dir(write_tree(tmp_path, MINI_VLLM))
    assert states(source, EXPECTED) == EXPECTED


def test_the_same_answers_from_a_wheel_read_in_place(tmp_path):
    write_tree(tmp_path / "tree", MINI_VLLM)
    wheel = tmp_path / "vllm-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for relpath in MINI_VLLM:
            archive.write(tmp_path / "tree" / relpath, relpath)
    assert states(VllmSource.from_wheel(wheel), EXPECTED) == EXPECTED


def test_missing_definitions_are_unknown_not_absent(tmp_path):
    files = {k: v for k, v in MINI_VLLM.items() if k not in ("vllm/envs.py", "vllm/entrypoints/openai/cli_args.py")}
    source = VllmSource.from_package_dir(write_tree(tmp_path, files))
    outcomes = probe_features(source, ("env:VLLM_PLUGINS", "cli:--port", "speculative_method:dflash"))
    assert [o.state for o in outcomes] == ["unknown", "unknown", "present"]
    assert "not found in" in outcomes[0].evidence


def test_threads_sharing_one_source_parse_one_at_a_time_and_each_file_once(tmp_path, monkeypatch):
    # CPython 3.11's AST builder keeps interpreter-wide state: two parses at once can raise SystemError (CI hit it
    # in the dry table's threads). The source must serialise its parses; this counts who is inside ast.parse.
    import ast
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    source = VllmSource.from_package_dir(write_tree(tmp_path, MINI_VLLM))
    real_parse, inside, most_inside, parsed = ast.parse, [0], [0], []
    count_lock = threading.Lock()

    def watched_parse(text, *args, **kwargs):
        with count_lock:
            inside[0] += 1
            most_inside[0] = max(most_inside[0], inside[0])
            parsed.append(kwargs.get("filename"))
        time.sleep(0.02)  # long enough that unserialised threads would overlap here
        try:
            return real_parse(text, *args, **kwargs)
        finally:
            with count_lock:
                inside[0] -= 1

    monkeypatch.setattr(ast, "parse", watched_parse)
    source_module._PARSED.clear()  # these texts may have been parsed by an earlier test (a cache: emptied, not swapped)
    relpaths = sorted(MINI_VLLM) * 3
    with ThreadPoolExecutor(max_workers=6) as pool:
        trees = list(pool.map(source.tree, relpaths))
    assert all(tree is not None for tree in trees)
    assert most_inside[0] == 1
    assert sorted(parsed) == sorted(MINI_VLLM)


def test_feature_grammar():
    assert parse_feature("speculative_config.attention_backend") == ("speculative_config", "attention_backend")
    assert parse_feature("cli:--language-model-only") == ("cli", "--language-model-only")
    assert parse_feature("moe_backend:aiter") == ("moe_backend", "aiter")
    for bad in ("dflash", "speculative_config.", "speculative_config:x", "cli:", "cli:-x", "nope:x"):
        with pytest.raises(ValueError):
            parse_feature(bad)
    for name in INTRODUCED_IN:
        parse_feature(name)  # every documented origin names a probe-able feature


installed = package_dir()


needs_installed_vllm = pytest.mark.skipif(installed is None, reason="vLLM is not installed in this Python")


@needs_installed_vllm
def test_installed_vllm_has_what_the_recipe_needs():
    source = VllmSource.from_package_dir(installed)
    outcomes = probe_features(source, RECIPE_FEATURES + ("speculative_method:no_such_method", "cli:--no-such-flag"))
    assert {o.name: o.state for o in outcomes} == {
        **{name: "present" for name in RECIPE_FEATURES},
        "speculative_method:no_such_method": "absent",
        "cli:--no-such-flag": "absent",
    }

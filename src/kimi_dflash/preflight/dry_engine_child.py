"""The dry engine's child: vLLM's own start-up code for one `vllm serve` argv, nothing loaded, nothing served.

Run as `python -c <this file's text> ARGV_JSON` in the Python that will serve (standard library at top level, like
runtime_child.py). It runs vLLM's serve argument parser on the argv, `AsyncEngineArgs.from_cli_args(...)
.create_engine_config()` (model, speculative, cache, parallel and scheduler configs, the platform's
check_and_update_config), then reads what vLLM chose: model runner, KV dtype, graph mode, and the attention backend
for the target. vLLM's own exception, if any, is the verdict. One marked JSON line on stdout.

Only the host's real platform is used: no simulated ROCm or CUDA (see dry_engine.py for why).
"""

from __future__ import annotations

import json
import sys
import traceback

MARKER = "KIMI_DFLASH_DRY_ENGINE "


def _stage(report: dict, name: str) -> None:
    report["stages"].append(name)


def dry_run(argv: list[str]) -> dict:
    report: dict = {"stages": [], "error": None}
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        _stage(report, "import")
        args = argv[argv.index("serve") + 1 :] if "serve" in argv else list(argv)
        parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
        model, rest = (args[0], args[1:]) if args and not args[0].startswith("-") else (None, args)
        namespace = parser.parse_args(rest)
        if model is not None:
            namespace.model = model
        _stage(report, "parse")
        config = AsyncEngineArgs.from_cli_args(namespace).create_engine_config()
        _stage(report, "create_engine_config")
        from vllm.platforms import current_platform

        report["platform"] = type(current_platform).__name__
        report["runner"] = "V2" if config.use_v2_model_runner else "V1"
        report["kv_cache_dtype"] = str(config.cache_config.cache_dtype)
        report["prefix_caching"] = bool(config.cache_config.enable_prefix_caching)
        report["enforce_eager"] = bool(config.model_config.enforce_eager)
        report["cudagraph_mode"] = str(getattr(config.compilation_config, "cudagraph_mode", None))
        report["use_mla"] = bool(config.model_config.use_mla)
        spec = config.speculative_config
        report["speculative"] = None if spec is None else {"method": spec.method, "k": spec.num_speculative_tokens}
        report["target_attention"] = _target_backend(config)
        _stage(report, "attention backend")
    except SystemExit as exit_:  # argparse's error path
        report["error"] = f"vLLM's argument parser exited ({exit_.code})"
    except Exception as error:  # noqa: BLE001 - vLLM's own error is the verdict
        report["error"] = f"{type(error).__name__}: {error}"
        report["where"] = traceback.format_exc().strip().splitlines()[-3:]
    return report


def _target_backend(config: object) -> str | None:
    """The backend vLLM's selector gives the target's attention layers (head size, dtype, KV dtype, MLA)."""
    try:
        from vllm.config import set_current_vllm_config
        from vllm.v1.attention.selector import get_attn_backend

        model = config.model_config  # type: ignore[attr-defined]
        with set_current_vllm_config(config):  # type: ignore[arg-type]
            backend = get_attn_backend(
                model.get_head_size(),
                model.dtype,
                config.cache_config.cache_dtype,  # type: ignore[attr-defined]
                use_mla=model.use_mla,
            )
        return backend.get_name()
    except Exception as error:  # noqa: BLE001 - reported, not fatal: the config itself was accepted
        return f"unknown ({type(error).__name__}: {error})"


if __name__ == "__main__":
    result = dry_run(json.loads(sys.argv[1]))
    sys.stdout.write("\n" + MARKER + json.dumps(result, default=str) + "\n")

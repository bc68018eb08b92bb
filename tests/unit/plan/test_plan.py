"""The launch plan: exact argv and environment for each shipped config, rendered for --dry-run."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from kimi_dflash.config.validate import load_config
from kimi_dflash.plan import OPTION_KEYS, build_plan
from kimi_dflash.rules.deployment import parse_serve_command
from repo_paths import CONFIGS_DIR
from serve_helpers import run_serve, serve_in_process, write


def plan_for(name: str, environ: dict[str, str] | None = None):
    config = load_config(CONFIGS_DIR / name, environ=environ or {})
    return build_plan(config, python_executable="/usr/bin/python3", cache_dir="/cache")


def flag_value(argv: tuple[str, ...], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_production_plan_has_every_recipe_flag() -> None:
    plan = plan_for("production.env")
    argv = plan.argv
    assert argv[:3] == ("vllm", "serve", "/models/Kimi-K2.6")
    expected = {
        "--served-model-name": "kimi-k2.6-amd-dflash",
        "--port": "8262",
        "--host": "127.0.0.1",
        "--tensor-parallel-size": "8",
        "--max-num-seqs": "32",
        "--max-num-batched-tokens": "32768",
        "--max-model-len": "262144",
        "--gpu-memory-utilization": "0.9",
        "--block-size": "16",
        "--tool-call-parser": "kimi_k2",
        "--reasoning-parser": "kimi_k2",
        "--kv-cache-dtype": "auto",
        "--mm-encoder-tp-mode": "data",
    }
    assert {flag: flag_value(argv, flag) for flag in expected} == expected
    # Defect 1 of issue 8: the recipe's `--moe-backend aiter` never selected an AITER kernel for Kimi's INT4
    # experts and makes vLLM >= 0.27 refuse the model; production lets vLLM pick (Triton WNA16 on ROCm).
    assert "--moe-backend" not in argv
    for flag in ("--enforce-eager", "--trust-remote-code", "--enable-auto-tool-choice", "--no-enable-prefix-caching"):
        assert flag in argv
    assert "--language-model-only" not in argv
    assert json.loads(flag_value(argv, "--speculative-config")) == {
        "method": "dflash",
        "model": "/models/Kimi-K2.5-DFlash",
        "num_speculative_tokens": 2,
    }
    assert plan.env["VLLM_ROCM_USE_AITER"] == "1" and plan.env["VLLM_ROCM_USE_AITER_MLA"] == "1"
    assert plan.env["VLLM_ROCM_QUICK_REDUCE_QUANTIZATION"] == "INT4"


@pytest.mark.parametrize(
    "name",
    [
        "production.env",
        "production-fp8kv.env",
        "production-fp8kv-safe.env",
        "production-fp8kv-matched.env",
        "baseline.env",
        "h200.env",
    ],
)
def test_no_shipped_gpu_config_sends_moe_backend_aiter(name: str) -> None:
    command = parse_serve_command(plan_for(name).argv)
    assert command.value("--moe-backend") in (None, "auto", "triton")


def test_every_option_the_plans_write_names_its_config_key(tmp_path: Path) -> None:
    # Compatibility findings name the key to change through OPTION_KEYS; a new option must be added there.
    cpu = load_config(
        write(
            tmp_path,
            f"DEVICE=cpu\nMOE_BACKEND=triton\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=32\n"
            f"MODEL_DIR={tmp_path}\nDRAFT_MODEL_DIR={tmp_path}\nDTYPE=float32\n"
            "ENABLE_PREFIX_CACHING=true\nMAX_MODEL_LEN=4096\n",
        ),
        environ={},
    )
    plans = [plan_for(n, {"LANGUAGE_MODEL_ONLY": "true"}) for n in ("production.env", "production-fp8kv.env")]
    plans += [plan_for("h200.env"), build_plan(cpu, "/venv/bin/python", "/cache")]
    options = {o for plan in plans for o in parse_serve_command(plan.argv).options}
    assert options - OPTION_KEYS.keys() == set()


def test_fp8_safe_plan_moves_mla_decode_off_aiter_and_keeps_everything_else() -> None:
    safe, fp8 = plan_for("production-fp8kv-safe.env"), plan_for("production-fp8kv.env")
    assert safe.env["VLLM_ROCM_USE_AITER_MLA"] == "0" and fp8.env["VLLM_ROCM_USE_AITER_MLA"] == "1"
    assert safe.argv == fp8.argv
    assert {k: v for k, v in safe.env.items() if k != "VLLM_ROCM_USE_AITER_MLA"} == {
        k: v for k, v in fp8.env.items() if k != "VLLM_ROCM_USE_AITER_MLA"
    }


def test_fp8_plan_keeps_drafter_kv_separate_and_exports_scale_mode() -> None:
    plan = plan_for("production-fp8kv.env")
    assert flag_value(plan.argv, "--kv-cache-dtype") == "fp8"
    spec = json.loads(flag_value(plan.argv, "--speculative-config"))
    assert spec["kv_cache_dtype"] == "auto"
    assert plan.env["KIMI_DFLASH_KV_SCALE_MODE"] == "dynamic"
    # Defect 5 of issue 8: production's dynamic scale freezes after a bounded warm-up.
    assert int(plan.env["KIMI_DFLASH_KV_SCALE_WARMUP_STEPS"]) > 0


def test_baseline_plan_has_no_speculation_and_same_engine_settings() -> None:
    base, dflash = plan_for("baseline.env").argv, plan_for("production.env").argv
    assert "--speculative-config" not in base
    for flag in ("--max-num-seqs", "--max-num-batched-tokens", "--block-size", "--kv-cache-dtype"):
        assert flag_value(base, flag) == flag_value(dflash, flag)


def test_language_model_only_replaces_the_encoder_split() -> None:
    plan = plan_for("production.env", {"LANGUAGE_MODEL_ONLY": "true"})
    assert "--language-model-only" in plan.argv and "--mm-encoder-tp-mode" not in plan.argv


def test_h200_plan_has_no_rocm_environment() -> None:
    plan = plan_for("h200.env")
    assert not any(name.startswith("VLLM_ROCM") for name in plan.env)
    assert "--moe-backend" not in plan.argv


def test_cpu_plan_uses_the_cpu_entry_and_cpu_environment(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    config = load_config(
        write(
            tmp_path,
            "DEVICE=cpu\nMOE_BACKEND=auto\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=32\n"
            f"MODEL_DIR={tmp_path}/t\nSPECULATIVE_METHOD=none\n",
        ),
        environ={},
    )
    plan = build_plan(config, "/venv/bin/python", "/cache")
    assert plan.argv[:4] == ("/venv/bin/python", "-m", "kimi_dflash.vllm_entry", "serve")
    assert "--tensor-parallel-size" not in plan.argv and "--gpu-memory-utilization" not in plan.argv
    assert plan.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and plan.env["VLLM_CACHE_ROOT"] == "/cache/vllm"


def test_cpu_plan_preloads_what_it_is_given_unless_switched_off(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    text = (
        f"DEVICE=cpu\nMOE_BACKEND=auto\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=32\nMODEL_DIR={tmp_path}/t\n"
        "SPECULATIVE_METHOD=none\n"
    )
    libraries = ("/usr/lib/libtcmalloc_minimal.so.4", "/venv/lib/libiomp5.so")
    config = load_config(write(tmp_path, text), environ={})
    assert build_plan(config, "/venv/bin/python", "/cache", cpu_preload=libraries).env["LD_PRELOAD"] == ":".join(
        libraries
    )
    assert "LD_PRELOAD" not in build_plan(config, "/venv/bin/python", "/cache").env  # nothing found, nothing set
    off = load_config(write(tmp_path, text + "CPU_PRELOAD_LIBS=false\n"), environ={})
    assert "LD_PRELOAD" not in build_plan(off, "/venv/bin/python", "/cache", cpu_preload=libraries).env
    gpu = plan_for("production.env")
    assert "LD_PRELOAD" not in gpu.env


def test_api_key_goes_through_environment_and_is_redacted() -> None:
    plan = plan_for("production.env", {"API_KEY": "sk-topsecret"})
    assert "sk-topsecret" not in " ".join(plan.argv)
    assert plan.env["VLLM_API_KEY"] == "sk-topsecret"
    assert "sk-topsecret" not in plan.render() and "VLLM_API_KEY=***" in plan.render()


def test_extra_args_are_split_like_a_shell() -> None:
    plan = plan_for("production.env", {"EXTRA_VLLM_ARGS": "--seed 7 --disable-log-stats --x 'a b'"})
    assert plan.argv[-5:] == ("--seed", "7", "--disable-log-stats", "--x", "a b")


def test_plan_is_pure() -> None:
    assert plan_for("production.env") == plan_for("production.env")


def test_rendered_plan_round_trips_through_a_shell_parser() -> None:
    plan = plan_for("production-fp8kv.env")
    words = shlex.split(plan.render().replace("\\\n", " "))
    env_words = [w for w in words if "=" in w and not w.startswith("-") and w.split("=")[0].isupper()]
    assert words[len(env_words) :] == list(plan.argv)
    assert dict(w.split("=", 1) for w in env_words) == dict(plan.env)


@pytest.mark.parametrize("name", ["production.env", "baseline.env", "production-fp8kv.env"])
def test_serve_dry_run_prints_plan_and_touches_nothing(name: str, tmp_path: Path) -> None:
    result = serve_in_process(str(CONFIGS_DIR / name), "--dry-run", env={"KIMI_DFLASH_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr
    assert "--served-model-name" in result.stdout and "\n  --port 8262" in result.stdout
    assert not (tmp_path / "cache").exists()


def test_every_vllm_option_the_schema_declares_exists_in_the_installed_vllm() -> None:
    """The one table (config/schema.py: Key.vllm) against vLLM's own CLI definitions, read from its source."""
    from kimi_dflash.config.schema import KEYS
    from kimi_dflash.patcher.floor import package_dir
    from kimi_dflash.rules.features import probe_features
    from kimi_dflash.rules.source import VllmSource

    package_dir = package_dir()
    if package_dir is None:
        pytest.skip("no vLLM installed here")
    flags = sorted({flag for key in KEYS if key.vllm for flag in key.vllm.flags})
    outcomes = probe_features(VllmSource.from_package_dir(package_dir), tuple(f"cli:{flag}" for flag in flags))
    assert {o.name: o.state for o in outcomes} == {f"cli:{flag}": "present" for flag in flags}
    assert OPTION_KEYS["--no-enable-prefix-caching"] == "ENABLE_PREFIX_CACHING"
    assert OPTION_KEYS["--disable-fastapi-docs"] == "API_KEY" and OPTION_KEYS["--load-format"] == "PRESHARD_DIR"


# ---------------------------------------------------------------- CUDA hosts (h200.env, demo-gpu*.env)


@pytest.mark.parametrize("name", ["h200.env", "demo-gpu.env", "demo-gpu-fp8kv.env"])
def test_cuda_plans_keep_the_drivers_jit_cache_under_the_project_cache(name: str) -> None:
    """vLLM 0.26's Marlin MoE kernels ship PTX only for Hopper: a persistent JIT cache makes the ~30-40 s compile
    the first start's cost only."""
    env = plan_for(name).env
    assert env["CUDA_CACHE_PATH"] == "/cache/cuda-jit"
    assert env["CUDA_CACHE_MAXSIZE"] == str(4 << 30)


def test_a_users_cuda_cache_path_is_kept() -> None:
    # The plan set its own over the user's, silently: the serve's JIT cache went elsewhere than the user said.
    config = load_config(CONFIGS_DIR / "h200.env", environ={})
    user = {"CUDA_CACHE_PATH": "/fast/jit", "CUDA_CACHE_MAXSIZE": "1024"}
    assert build_plan(config, "/usr/bin/python3", "/cache", environ=user).env.items() >= user.items()
    dry = run_serve(str(CONFIGS_DIR / "h200.env"), "--dry-run", env={"CUDA_CACHE_PATH": "/fast/jit"})
    assert dry.returncode == 0 and "CUDA_CACHE_PATH=/fast/jit" in dry.stdout, dry.stderr


@pytest.mark.parametrize("name", ["production.env", "demo-cpu.env"])
def test_only_cuda_plans_set_cuda_variables(name: str) -> None:
    config = load_config(CONFIGS_DIR / name, environ={})
    env = build_plan(config, python_executable="/usr/bin/python3", cache_dir="/cache").env
    assert not {"CUDA_CACHE_PATH", "CUDA_CACHE_MAXSIZE"} & env.keys()


def test_demo_gpu_plan_serves_the_cuda_miniature_on_one_gpu() -> None:
    from kimi_dflash.launch.prepare import resolve_demo_models

    config = resolve_demo_models(load_config(CONFIGS_DIR / "demo-gpu.env", environ={}), create=False)
    plan = build_plan(config, python_executable="/usr/bin/python3", cache_dir="/cache")
    argv = plan.argv
    assert argv[:2] == ("vllm", "serve") and argv[2].endswith("/demo/kimi-cuda/target-int4")
    expected = {
        "--tensor-parallel-size": "1",
        "--dtype": "bfloat16",
        "--kv-cache-dtype": "auto",
        "--max-num-seqs": "32",
        "--block-size": "16",
        "--gpu-memory-utilization": "0.5",
    }
    assert {flag: flag_value(argv, flag) for flag in expected} == expected
    assert "--enforce-eager" in argv and "--language-model-only" in argv and "--trust-remote-code" not in argv
    spec = json.loads(flag_value(argv, "--speculative-config"))
    assert spec["method"] == "dflash" and spec["num_speculative_tokens"] == 2
    assert spec["model"].endswith("/demo/kimi-cuda/drafter")
    assert plan.env["HF_HUB_OFFLINE"] == "1"


def test_demo_gpu_fp8kv_plan_is_demo_gpu_with_flashmla_blocks_and_the_kv_scale_hook() -> None:
    fp8, bf16 = plan_for("demo-gpu-fp8kv.env"), plan_for("demo-gpu.env")
    assert flag_value(fp8.argv, "--kv-cache-dtype") == "fp8" and flag_value(fp8.argv, "--block-size") == "64"
    assert json.loads(flag_value(fp8.argv, "--speculative-config"))["kv_cache_dtype"] == "auto"
    assert fp8.env["KIMI_DFLASH_KV_SCALE_MODE"] == "dynamic" and int(fp8.env["KIMI_DFLASH_KV_SCALE_WARMUP_STEPS"]) > 0
    changed = {"--kv-cache-dtype", "--block-size", "--served-model-name", "--speculative-config"}
    options = parse_serve_command(fp8.argv).options
    assert {o for o in options if options[o] != parse_serve_command(bf16.argv).options.get(o)} == changed

"""Config parsing and validation: every shipped config validates; each known mistake is rejected by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from kimi_dflash.checkpoint import read_facts
from kimi_dflash.config.problems import ConfigError
from kimi_dflash.config.schema import KEYS
from kimi_dflash.config.validate import check_paths, load_config
from repo_paths import CONFIGS_DIR
from serve_helpers import run_serve, write

SHIPPED = sorted(CONFIGS_DIR.glob("*.env"))


# A valid GPU base every bad case starts from, so each case differs by exactly the mistake under test.
BASE = "DEVICE=rocm\nMODEL_DIR=/m/target\nDRAFT_MODEL_DIR=/m/draft\n"


def problems_of(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> list:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ=environ or {})
    return info.value.problems


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_config_validates(path: Path) -> None:
    config = load_config(path, environ={})
    assert config["SERVED_MODEL_NAME"]


def test_production_has_the_reference_settings() -> None:
    config = load_config(CONFIGS_DIR / "production.env", environ={})
    expected = {
        "NUM_SPECULATIVE_TOKENS": 2,
        "MAX_NUM_SEQS": 32,
        "MAX_NUM_BATCHED_TOKENS": 32768,
        "MAX_MODEL_LEN": 262144,
        "GPU_MEMORY_UTILIZATION": 0.90,
        "BLOCK_SIZE": 16,
        "ENFORCE_EAGER": True,
        "MOE_BACKEND": "auto",
        "TENSOR_PARALLEL_SIZE": 8,
        "PORT": 8262,
        "KV_CACHE_DTYPE": "auto",
        "SERVED_MODEL_NAME": "kimi-k2.6-amd-dflash",
        "ENABLE_PREFIX_CACHING": False,
        "SPECULATIVE_METHOD": "dflash",
        "HOST": "127.0.0.1",
    }
    assert {key: config[key] for key in expected} == expected


def test_extends_chain_overrides_only_what_it_sets() -> None:
    base = load_config(CONFIGS_DIR / "production.env", environ={})
    fp8 = load_config(CONFIGS_DIR / "production-fp8kv.env", environ={})
    safe = load_config(CONFIGS_DIR / "production-fp8kv-safe.env", environ={})
    assert (fp8["KV_CACHE_DTYPE"], fp8["MAX_NUM_SEQS"], fp8["DRAFT_KV_CACHE_DTYPE"]) == ("fp8", 64, "auto")
    assert safe["ROCM_USE_AITER_MLA"] is False and safe["KV_CACHE_DTYPE"] == "fp8"
    assert safe["MOE_BACKEND"] == fp8["MOE_BACKEND"] == "auto"
    untouched = [
        k.name
        for k in KEYS
        if k.name
        not in {"KV_CACHE_DTYPE", "MAX_NUM_SEQS", "DRAFT_KV_CACHE_DTYPE", "KV_SCALE_MODE", "KV_SCALE_WARMUP_STEPS"}
    ]
    assert {k: fp8[k] for k in untouched} == {k: base[k] for k in untouched}
    assert fp8.sources["MAX_NUM_SEQS"].startswith("configs/production-fp8kv.env:")
    assert fp8.sources["BLOCK_SIZE"].startswith("configs/production.env:")


def test_process_environment_overrides_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, BASE + "PORT=8262\n"), environ={"PORT": "9000", "UNRELATED": "x"})
    assert config["PORT"] == 9000 and config.sources["PORT"] == "environment"


def test_relative_paths_resolve_against_the_config_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "DEVICE=rocm\nMODEL_DIR=models/t\nDRAFT_MODEL_DIR=../d\n"), environ={})
    assert config["MODEL_DIR"] == (tmp_path / "models/t").resolve()
    assert config["DRAFT_MODEL_DIR"] == (tmp_path.parent / "d").resolve()


def test_interpolation_from_environment(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, "DEVICE=rocm\nMODEL_DIR=${ROOT}/t\nDRAFT_MODEL_DIR=${ROOT}/d\n"), environ={"ROOT": "/data"}
    )
    assert config["MODEL_DIR"] == Path("/data/t")


def test_quotes_comments_and_export_are_parsed(tmp_path: Path) -> None:
    text = BASE + 'export SERVED_MODEL_NAME="my model"  # inline comment\n\n# a comment\nPORT = 9001\n'
    config = load_config(write(tmp_path, text), environ={})
    assert (config["SERVED_MODEL_NAME"], config["PORT"]) == ("my model", 9001)


# ------------------------------------------------------------------ rejections: one test per case

REJECTED = {
    "unknown_key_with_suggestion": ("MAX_NUM_SEQ=8\n", "MAX_NUM_SEQ", "did you mean MAX_NUM_SEQS"),
    "unknown_key_without_suggestion": ("FOO_BAR_BAZ=1\n", "FOO_BAR_BAZ", "unknown key"),
    "int_not_a_number": ("MAX_NUM_SEQS=lots\n", "MAX_NUM_SEQS", "not a whole number"),
    "int_float_value": ("MAX_NUM_SEQS=3.5\n", "MAX_NUM_SEQS", "not a whole number"),
    "float_not_a_number": ("GPU_MEMORY_UTILIZATION=high\n", "GPU_MEMORY_UTILIZATION", "not a number"),
    "float_nan": ("GPU_MEMORY_UTILIZATION=nan\n", "GPU_MEMORY_UTILIZATION", "not a finite number"),
    "float_out_of_range": ("GPU_MEMORY_UTILIZATION=1.5\n", "GPU_MEMORY_UTILIZATION", "out of range"),
    "bool_not_a_bool": ("ENFORCE_EAGER=maybe\n", "ENFORCE_EAGER", "use true or false"),
    "enum_not_a_choice": ("KV_CACHE_DTYPE=fp4\n", "KV_CACHE_DTYPE", "not one of"),
    "enum_typo_suggests": ("MOE_BACKEND=aitr\n", "MOE_BACKEND", "did you mean aiter"),
    "port_out_of_range": ("PORT=70000\n", "PORT", "out of range"),
    "port_zero": ("PORT=0\n", "PORT", "out of range"),
    "block_size_not_multiple_of_16": ("BLOCK_SIZE=24\n", "BLOCK_SIZE", "not a multiple of 16"),
    "block_size_too_small": ("BLOCK_SIZE=8\n", "BLOCK_SIZE", "out of range"),
    "spec_tokens_zero": ("NUM_SPECULATIVE_TOKENS=0\n", "NUM_SPECULATIVE_TOKENS", "out of range"),
    "spec_tokens_negative": ("NUM_SPECULATIVE_TOKENS=-2\n", "NUM_SPECULATIVE_TOKENS", "out of range"),
    "empty_required_value": ("MAX_NUM_SEQS=\n", "MAX_NUM_SEQS", "empty value"),
    "key_without_value": ("MAX_NUM_SEQS\n", "MAX_NUM_SEQS", "key without a value"),
    "unparseable_line": ('PORT="8262\n', None, "cannot parse"),
    "duplicate_key": ("PORT=1\nPORT=2\n", "PORT", "set twice"),
    "batched_tokens_below_seqs": (
        "MAX_NUM_SEQS=64\nMAX_NUM_BATCHED_TOKENS=32\n",
        "MAX_NUM_BATCHED_TOKENS",
        "smaller than MAX_NUM_SEQS",
    ),
    "fp8_kv_without_drafter_kv_dtype": (
        "KV_CACHE_DTYPE=fp8\nKV_SCALE_MODE=dynamic\n",
        "DRAFT_KV_CACHE_DTYPE",
        "drafter's KV dtype is not chosen",
    ),
    "fp8_kv_without_scales_on_gpu": (
        "KV_CACHE_DTYPE=fp8\nDRAFT_KV_CACHE_DTYPE=auto\n",
        "KV_SCALE_MODE",
        "without scales",
    ),
    "calibrated_without_file": (
        "KV_CACHE_DTYPE=fp8\nDRAFT_KV_CACHE_DTYPE=auto\nKV_SCALE_MODE=calibrated\n",
        "KV_SCALES_FILE",
        "needs a scales file",
    ),
    "observe_without_dir": ("KV_SCALE_MODE=observe\n", "KV_OBSERVE_DIR", "needs a directory"),
    "scale_floor_zero": ("KV_SCALE_FLOOR=0\n", "KV_SCALE_FLOOR", "out of range"),
    "aiter_moe_on_cuda": ("DEVICE=cuda\nMOE_BACKEND=aiter\n", "MOE_BACKEND", "only on ROCm"),
    "dynamic_fp8_scale_never_frozen_on_gpu": (
        "KV_CACHE_DTYPE=fp8\nDRAFT_KV_CACHE_DTYPE=auto\nKV_SCALE_MODE=dynamic\n",
        "KV_SCALE_WARMUP_STEPS",
        "never frozen",
    ),
    "cpu_with_tensor_parallel": (
        "DEVICE=cpu\nMOE_BACKEND=auto\nTENSOR_PARALLEL_SIZE=2\n",
        "TENSOR_PARALLEL_SIZE",
        "one process",
    ),
    "cpu_block_size_not_multiple_of_32": (
        "DEVICE=cpu\nMOE_BACKEND=auto\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=48\n",
        "BLOCK_SIZE",
        "multiple of 32",
    ),
    "auto_tool_choice_without_parser": ("TOOL_CALL_PARSER=\n", "ENABLE_AUTO_TOOL_CHOICE", "tool-call parser"),
    "extra_args_unbalanced_quote": ("EXTRA_VLLM_ARGS=--foo 'bar\n", "EXTRA_VLLM_ARGS", "cannot be split"),
    "demo_fabrication_with_model_dir": ("FABRICATE_DEMO_MODELS=kimi\n", "MODEL_DIR", "FABRICATE_DEMO_MODELS=kimi"),
    "demo_choice_was_a_bool": (
        "FABRICATE_DEMO_MODELS=true\n",
        "FABRICATE_DEMO_MODELS",
        "none, kimi, kimi-int4, kimi-eagle3, kimi-cuda, kimi-int4-cuda, qwen3",
    ),
    "demo_drafter_of_another_kind": (
        "FABRICATE_DEMO_MODELS=kimi-eagle3\nSPECULATIVE_METHOD=dflash\n",
        "SPECULATIVE_METHOD",
        "serves a drafter of kind eagle3",
    ),
    "cpu_dflash_prompt_longer_than_batch_budget": (
        "DEVICE=cpu\nMOE_BACKEND=auto\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=32\n"
        "MAX_MODEL_LEN=4096\nMAX_NUM_BATCHED_TOKENS=2048\n",
        "MAX_NUM_BATCHED_TOKENS",
        "never scheduled",
    ),
    "cpu_mla_demo_block_size_32": (
        "DEVICE=cpu\nMOE_BACKEND=auto\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=32\nFABRICATE_DEMO_MODELS=kimi\n",
        "BLOCK_SIZE",
        "blocks of 16",
    ),
    "cpu_gqa_demo_block_size_16": (
        "DEVICE=cpu\nMOE_BACKEND=auto\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=16\nFABRICATE_DEMO_MODELS=qwen3\n",
        "BLOCK_SIZE",
        "multiple of 32",
    ),
}


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_rejected(tmp_path: Path, case: str) -> None:
    text, key, message = REJECTED[case]
    # Later lines of BASE would clash with "set twice" cases; DEVICE overrides are written into BASE itself.
    base = BASE.replace("DEVICE=rocm\n", "") if text.startswith("DEVICE=") else BASE
    problems = problems_of(tmp_path, base + text)
    rendered = "\n".join(p.render() for p in problems)
    assert any(p.key == key for p in problems), rendered
    assert message in rendered
    assert "fix:" in rendered
    assert "test.env" in rendered  # the file is named


def test_missing_model_dir_is_rejected(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, "DEVICE=rocm\nDRAFT_MODEL_DIR=/d\n")
    assert [p.key for p in problems] == ["MODEL_DIR"]
    assert "hf download moonshotai/Kimi-K2.6" in problems[0].fix


def test_dflash_without_drafter_is_rejected(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, "DEVICE=rocm\nMODEL_DIR=/m\n")
    assert [p.key for p in problems] == ["DRAFT_MODEL_DIR"]


def test_baseline_needs_no_drafter(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, "DEVICE=rocm\nMODEL_DIR=/m\nSPECULATIVE_METHOD=none\n"), environ={})
    assert not config.typed.speculative


def test_bad_environment_override_names_the_environment(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, BASE, environ={"PORT": "eighty"})
    assert problems[0].source == "environment" and problems[0].key == "PORT"


def test_all_problems_reported_at_once(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, BASE + "PORT=x\nBLOCK_SIZE=20\nNOPE=1\n")
    assert sorted(p.key for p in problems) == ["BLOCK_SIZE", "NOPE", "PORT"]


def test_api_key_is_never_shown(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, BASE + "API_KEY=s3cret-value\nPORT=x\nAPI_KEY=again\n")
    rendered = "\n".join(p.render() for p in problems)
    assert "s3cret" not in rendered and "again" not in rendered


@pytest.mark.parametrize("args", ["--api-key s3cret 'x", "--api_key=s3cret --foo 'x", "'--api-key s3cret"])
def test_a_key_in_extra_args_that_cannot_be_split_is_never_shown(tmp_path: Path, args: str) -> None:
    # The unsplittable value was shown verbatim: the secret check only ran after a successful split.
    problems = problems_of(tmp_path, BASE + f'EXTRA_VLLM_ARGS="{args}"\n')
    assert [p.key for p in problems] == ["EXTRA_VLLM_ARGS"] and "cannot be split" in problems[0].message
    assert "s3cret" not in problems[0].render()


def test_extends_cycle_is_rejected(tmp_path: Path) -> None:
    write(tmp_path, "EXTENDS=b.env\n", "a.env")
    write(tmp_path, "EXTENDS=a.env\n", "b.env")
    with pytest.raises(ConfigError, match="EXTENDS loops"):
        load_config(tmp_path / "a.env", environ={})


def test_extends_missing_base_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(write(tmp_path, "EXTENDS=nowhere.env\n" + BASE), environ={})


@pytest.mark.parametrize("line", ["EXTENDS=\n", "EXTENDS='  '\n"])
def test_an_empty_extends_names_the_key(tmp_path: Path, line: str) -> None:
    # It said "<config dir>: cannot read config file: is a directory" without naming EXTENDS.
    problems = problems_of(tmp_path, line + BASE)
    assert [(p.key, p.message) for p in problems] == [("EXTENDS", "empty value: names no base config")]
    assert "test.env:1" in problems[0].source


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "myhost", "::ffff:10.0.0.1"])
def test_exposed_host_without_api_key_warns(tmp_path: Path, host: str) -> None:
    config = load_config(write(tmp_path, BASE + f"HOST={host}\n"), environ={})
    assert [w.key for w in config.warnings] == ["HOST"]


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "localhost", "LOCALHOST", "::ffff:127.0.0.1"])
def test_loopback_hosts_are_not_warned_about(tmp_path: Path, host: str) -> None:
    assert load_config(write(tmp_path, BASE + f"HOST={host}\n"), environ={}).warnings == ()


def test_a_bracketed_host_is_refused_with_the_spelling_vllm_binds(tmp_path: Path) -> None:
    # vLLM binds HOST as written: "[::1]" is no address to it (it would fail at start, after preflight's port FAIL).
    problems = problems_of(tmp_path, BASE + "HOST=[::1]\n")
    assert [p.key for p in problems] == ["HOST"] and "HOST=::1" in problems[0].fix


@pytest.mark.parametrize(
    ("extra", "key"),
    [("--host 0.0.0.0", "HOST"), ("--host=0.0.0.0", "HOST"), ("--ho 0.0.0.0", "HOST"), ("--ho=::", "HOST"),
     ("--port 9000", "PORT"), ("--port=9000", "PORT"), ("--por 9000", "PORT"), ("--max_num_seqs 4 --host x", "HOST")],
)  # fmt: skip
def test_extra_args_may_not_move_the_server(tmp_path: Path, extra: str, key: str) -> None:
    # vLLM takes the last --host/--port: one in EXTRA_VLLM_ARGS bound every interface without the warning, and the
    # port check, readiness probe and pid file would look at HOST/PORT.
    problems = problems_of(tmp_path, BASE + f"EXTRA_VLLM_ARGS='{extra}'\n")
    assert [p.key for p in problems] == ["EXTRA_VLLM_ARGS"]
    assert f"set {key}=" in problems[0].fix


def test_extra_args_that_only_look_like_host_or_port_pass(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, BASE + "EXTRA_VLLM_ARGS='--hf-token-x 1 --ports-x 2 --max_num_seqs 4'\n"),
                         environ={})  # fmt: skip
    assert config.typed.extra_vllm_args is not None


def test_batched_tokens_above_the_recipes_budget_only_warn_and_say_the_cause_is_unverified(tmp_path: Path) -> None:
    # Issue 8, defect 1: the recipe blamed AITER's MoE grid, but Kimi's INT4 experts never ran an AITER kernel.
    config = load_config(write(tmp_path, BASE + "MAX_NUM_BATCHED_TOKENS=65536\n"), environ={})
    [warning] = config.warnings
    assert warning.key == "MAX_NUM_BATCHED_TOKENS" and "unverified" in warning.message
    assert "Triton WNA16" in warning.message
    cpu = "DEVICE=cpu\nMOE_BACKEND=auto\nTENSOR_PARALLEL_SIZE=1\nBLOCK_SIZE=32\nMODEL_DIR=/m\nSPECULATIVE_METHOD=none\n"
    assert load_config(write(tmp_path, cpu + "MAX_NUM_BATCHED_TOKENS=65536\n"), environ={}).warnings == ()


def test_dynamic_fp8_scales_with_a_bounded_warm_up_or_calibration_are_accepted(tmp_path: Path) -> None:
    fp8 = BASE + "KV_CACHE_DTYPE=fp8\nDRAFT_KV_CACHE_DTYPE=auto\n"
    load_config(write(tmp_path, fp8 + "KV_SCALE_MODE=dynamic\nKV_SCALE_WARMUP_STEPS=2048\n"), environ={})
    load_config(write(tmp_path, fp8 + "KV_SCALE_MODE=calibrated\nKV_SCALES_FILE=/s.json\n"), environ={})


def test_spec_tokens_above_drafter_block_size(tmp_path: Path) -> None:
    drafter = tmp_path / "draft"
    drafter.mkdir()
    (drafter / "config.json").write_text('{"block_size": 8, "dflash_config": {"mask_token_id": 5}}')
    (tmp_path / "target").mkdir()
    config = load_config(
        write(
            tmp_path, f"DEVICE=rocm\nMODEL_DIR={tmp_path}/target\nDRAFT_MODEL_DIR={drafter}\nNUM_SPECULATIVE_TOKENS=9\n"
        ),
        environ={},
    )
    problems = check_paths(config, read_facts(config.typed))
    assert [p.key for p in problems] == ["NUM_SPECULATIVE_TOKENS"]
    assert "block size (8)" in problems[0].message


def test_spec_tokens_equal_to_block_size_only_warns(tmp_path: Path) -> None:
    drafter = tmp_path / "draft"
    drafter.mkdir()
    (drafter / "config.json").write_text('{"block_size": 8}')
    (tmp_path / "target").mkdir()
    config = load_config(
        write(
            tmp_path, f"DEVICE=rocm\nMODEL_DIR={tmp_path}/target\nDRAFT_MODEL_DIR={drafter}\nNUM_SPECULATIVE_TOKENS=8\n"
        ),
        environ={},
    )
    problems = check_paths(config, read_facts(config.typed))
    assert [(p.key, p.severity) for p in problems] == [("NUM_SPECULATIVE_TOKENS", "warning")]
    assert "at most 7" in problems[0].fix


def test_missing_directories_are_reported(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, BASE), environ={})
    assert sorted(p.key for p in check_paths(config, read_facts(config.typed))) == ["DRAFT_MODEL_DIR", "MODEL_DIR"]


def test_drafter_architecture_config_matches_the_recipe() -> None:
    import json
    from importlib import resources

    from kimi_dflash.checkpoint import read_checkpoint

    config = json.loads(resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["model_type"] == "qwen3"
    assert (config["num_hidden_layers"], config["hidden_size"]) == (6, 7168)
    assert config["dflash_config"] == {"mask_token_id": 163838, "target_layer_ids": [1, 12, 24, 35, 47, 58]}
    assert read_checkpoint(CONFIGS_DIR, None, "drafter") == (None, None)  # the reader needs the real file name
    shipped, _ = read_checkpoint(CONFIGS_DIR, "z-lab/Kimi-K2.5-DFlash", "drafter")
    assert config["block_size"] == 8 and shipped is not None and shipped.block_size == 8


def test_a_checkpoint_config_that_is_not_an_object_reads_as_unknown(tmp_path: Path) -> None:
    from kimi_dflash.checkpoint import read_checkpoint

    (tmp_path / "config.json").write_text('[{"block_size": 8, "kv_lora_rank": 512}]')
    facts, problem = read_checkpoint(tmp_path, None, "target")
    assert facts is None and "is not a JSON object" in str(problem)
    (tmp_path / "config.json").write_text('{"block_size": 8, "dflash_config": [1], "kv_lora_rank": 512}')
    facts, problem = read_checkpoint(tmp_path, None, "target")
    assert problem is None and facts is not None and facts.block_size == 8 and facts.mla


# ------------------------------------------------------------------ through serve.sh


def test_serve_rejects_bad_config_with_exit_2_and_no_traceback(tmp_path: Path) -> None:
    bad = write(tmp_path, BASE + "BLOCK_SIZE=20\nMAX_NUM_SEQ=3\n")
    result = run_serve(str(bad), "--dry-run")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "BLOCK_SIZE=20" in result.stderr and "did you mean MAX_NUM_SEQS" in result.stderr
    assert result.stdout == ""


# ------------------------------------------------------------------ the drafter RoPE amplitude (issue 33)


def test_the_drafter_rope_amplitude_is_legacy_engine_or_a_number(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, BASE), environ={}).typed.drafter_rope_choice == "legacy"  # the default
    for value, choice in (("engine", "engine"), ("1.25", 1.25), ("legacy", "legacy")):
        config = load_config(write(tmp_path, BASE + f"DRAFTER_ROPE_AMPLITUDE={value}\n"), environ={})
        assert config.typed.drafter_rope_choice == choice and config.warnings == ()
    for bad in ("trained", "0", "-1", "nan", "11"):
        [problem] = problems_of(tmp_path, BASE + f"DRAFTER_ROPE_AMPLITUDE={bad}\n")
        assert problem.key == "DRAFTER_ROPE_AMPLITUDE" and "not legacy, engine or an amplitude" in problem.message


def test_drafter_rope_fix_still_reads_with_a_warning_naming_its_replacement(tmp_path: Path) -> None:
    for old, choice in (("true", "legacy"), ("false", "engine")):
        config = load_config(write(tmp_path, BASE + f"DRAFTER_ROPE_FIX={old}\n"), environ={})
        [warning] = config.warnings
        assert config.typed.drafter_rope_choice == choice and warning.key == "DRAFTER_ROPE_FIX"
        assert "deprecated: DRAFTER_ROPE_AMPLITUDE replaces it" in warning.message
        assert warning.fix == f"write DRAFTER_ROPE_AMPLITUDE={choice} instead"
    [both] = problems_of(tmp_path, BASE + "DRAFTER_ROPE_FIX=true\nDRAFTER_ROPE_AMPLITUDE=engine\n")
    assert both.key == "DRAFTER_ROPE_FIX" and "set together with DRAFTER_ROPE_AMPLITUDE" in both.message

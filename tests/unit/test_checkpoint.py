"""Checkpoint facts, read once (kimi_dflash/checkpoint.py; issue 32 item 1): the one reader of a checkpoint's
config.json in src, its error policy (the guarded reader's, a refusal kept as the checkpoint's problem), values of the
wrong type read as unknown, and the rope fields in both schemas."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from compat_fixtures import INT4_KIMI, checkpoint
from kimi_dflash.checkpoint import facts_from_config, read_checkpoint, read_facts, read_rope
from kimi_dflash.config.validate import load_config
from repo_paths import CONFIGS_DIR, REPO_ROOT

SRC = REPO_ROOT / "src" / "kimi_dflash"
READERS = {"read_text", "read_bytes", "open", "read_user_json", "read_user_text", "read_user_bytes", "load", "loads"}


def _config_json_reads(tree: ast.AST) -> list[str]:
    """Calls that read a file named config.json: the literal, a name bound to it, or a path ending in either."""
    names: set[str] = {"CONFIG_FILE"}

    def names_it(node: ast.AST) -> bool:  # "config.json", CONFIG, x / "config.json", Path(x / CONFIG)
        if isinstance(node, ast.Call) and len(node.args) == 1:
            return names_it(node.args[0])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return names_it(node.right)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value.split("/")[-1] == "config.json"
        return isinstance(node, ast.Name) and node.id in names

    assigns = [n for n in ast.walk(tree) if isinstance(n, ast.Assign) and len(n.targets) == 1]
    for _ in range(3):  # names bound to names bound to the literal
        names |= {n.targets[0].id for n in assigns if isinstance(n.targets[0], ast.Name) and names_it(n.value)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        receiver = [func.value] if isinstance(func, ast.Attribute) else []
        if name in READERS and any(names_it(part) for part in [*receiver, *node.args]):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_src_reads_a_checkpoint_config_json_in_one_module_only() -> None:
    reads = {
        str(path.relative_to(SRC)): found
        for path in sorted(SRC.rglob("*.py"))
        if (found := _config_json_reads(ast.parse(path.read_text(encoding="utf-8"))))
    }
    assert set(reads) == {"checkpoint.py"}, reads


def test_the_scan_sees_the_shapes_a_reader_takes() -> None:
    """The scan above would catch each way the six readers of 7777476 were written."""
    for code in (
        'json.loads((model_dir / "config.json").read_text())',
        'read_user_json(Path(path) / "config.json", what="drafter config")',
        'path = directory / "config.json"\nread_user_json(path)',
        'CONFIG = "config.json"\nconfig_path = drafter_dir / CONFIG\nread_user_json(config_path)',
        'p = d / "config.json"\nwith p.open() as f: pass',
    ):
        assert _config_json_reads(ast.parse(code)), code
    assert not _config_json_reads(ast.parse('write_json_atomic(d / "config.json", {})'))


def test_facts_read_the_quantisation_nested_under_text_config(tmp_path: Path) -> None:
    facts, problem = read_checkpoint(checkpoint(tmp_path, INT4_KIMI), None, "target")
    assert problem is None and facts is not None and not facts.shipped
    assert facts.architectures == ("KimiK25ForConditionalGeneration",) and facts.mla
    assert facts.wna16_experts is not None and (facts.wna16_experts.num_bits, facts.wna16_experts.group_size) == (4, 32)
    assert facts.wna16_experts.pack_format == "pack-quantized"
    assert facts.fingerprint is not None and facts.fingerprint["num_hidden_layers"] == 2


def test_a_top_level_quantization_config_wins_like_in_vllm() -> None:
    config = {**INT4_KIMI, "quantization_config": {"quant_method": "fp8"}}
    assert facts_from_config(config, "x", "target", shipped=False).wna16_experts is None


def test_missing_model_dir_uses_the_shipped_kimi_facts_and_says_so(tmp_path: Path) -> None:
    facts, _ = read_checkpoint(tmp_path / "not-downloaded", "moonshotai/Kimi-K2.6", "target")
    assert facts is not None and facts.shipped and facts.fingerprint is None
    assert facts.mla and facts.routed_experts == 384 and facts.wna16_experts is not None
    assert "shipped facts" in facts.where() and "does not exist" in facts.where()
    assert read_checkpoint(tmp_path / "nowhere", "someone/other-model", "target") == (None, None)


def test_drafter_sliding_window_follows_layer_types_first() -> None:
    def facts(extra: dict) -> bool:
        return facts_from_config(
            {"architectures": ["DFlashDraftModel"], **extra}, "x", "drafter", shipped=False
        ).sliding_window

    assert facts({"layer_types": ["full_attention", "sliding_attention"]})
    assert not facts({"layer_types": ["full_attention"], "sliding_window": 4096})
    assert not facts({"sliding_window": 4096, "use_sliding_window": False})
    assert facts({"sliding_window": 4096})


def test_a_config_the_guarded_reader_refuses_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    directory = tmp_path / "drafter"
    directory.mkdir()
    (directory / "config.json").write_text("{not json")
    facts, problem = read_checkpoint(directory, "z-lab/Kimi-K2.5-DFlash", "drafter")
    assert facts is None and problem is not None  # never the shipped facts for a checkpoint that is there
    assert problem.startswith(f"drafter config.json {directory / 'config.json'}: not valid JSON")
    (directory / "config.json").write_text("[1, 2]")
    assert "is not a JSON object" in str(read_checkpoint(directory, None, "drafter")[1])


@pytest.mark.parametrize(
    "hostile",
    [
        {"architectures": 5},
        {"architectures": "DFlashDraftModel", "block_size": "8", "num_attention_heads": True},
        {
            "n_routed_experts": "many",
            "quantization_config": {"quant_method": "compressed-tensors", "config_groups": [1]},
        },
        {"text_config": [1], "dflash_config": "x", "layer_types": "sliding_attention"},
        {"rope_scaling": {"rope_type": "yarn", "factor": 64.0, "attention_factor": "abc"}},
        {"rope_scaling": {"rope_type": "yarn", "factor": [1]}, "rope_parameters": 7},
    ],
)
def test_values_of_the_wrong_type_read_as_unknown(hostile: dict) -> None:
    facts = facts_from_config({"model_type": "qwen3", **hostile}, "x", "drafter", shipped=False)
    assert facts.block_size is None and facts.routed_experts == 0 and not facts.dflash
    assert facts.rope is None or facts.rope.problem is not None


def test_rope_fields_in_both_schemas_and_the_one_transformers_uses() -> None:
    yarn = {"rope_type": "yarn", "factor": 64.0, "mscale": 1.0, "mscale_all_dim": 1.0}
    assert read_rope({"rope_parameters": {**yarn, "rope_theta": 5e4}}).field == "rope_parameters"  # type: ignore[union-attr]
    older = read_rope({"rope_scaling": {"type": "yarn", "factor": 64.0}})
    assert older is not None and older.kind == "yarn" and older.factor == 64.0
    # transformers 5 keeps rope_scaling when both are set (`rope_scaling or self.rope_parameters`): judged there,
    # and every field of the same rope type is one an overlay writes.
    both = read_rope({"rope_parameters": {**yarn, "factor": 32.0}, "rope_scaling": yarn})
    assert both is not None and both.field == "rope_scaling" and both.factor == 64.0
    assert both.fields == ("rope_scaling", "rope_parameters")
    other = read_rope({"rope_parameters": {"rope_type": "default"}, "rope_scaling": yarn})
    assert other is not None and other.fields == ("rope_scaling",)
    deepseek = read_rope({"rope_parameters": {**yarn, "rope_type": "deepseek_yarn"}})
    assert deepseek is not None and deepseek.kind == "deepseek_yarn"
    assert read_rope({"rope_scaling": None, "rope_parameters": {}}) is None
    bad = read_rope({"rope_scaling": {**yarn, "attention_factor": [1]}})
    assert bad is not None and bad.problem == "rope_scaling.attention_factor is [1], not a number"


def test_a_configs_facts_come_from_the_directories_it_names(tmp_path: Path) -> None:
    drafter = checkpoint(tmp_path, {"architectures": ["DFlashDraftModel"], "block_size": 8}, "drafter")
    config = load_config(CONFIGS_DIR / "production.env", environ={"DRAFT_MODEL_DIR": str(drafter)})
    facts = read_facts(config.typed)
    assert facts.target is not None and facts.target.shipped  # MODEL_DIR not downloaded: the shipped K2.6 facts
    assert facts.drafter is not None and facts.drafter.block_size == 8 and facts.drafter.directory == drafter
    (drafter / "config.json").write_text(json.dumps([]))
    broken = read_facts(config.typed)
    assert broken.drafter is None and "not a JSON object" in str(broken.problems.get(drafter))
    baseline = load_config(CONFIGS_DIR / "baseline.env", environ={"DRAFT_MODEL_DIR": str(drafter)})
    assert read_facts(baseline.typed).drafter is None  # no speculation: the drafter is not read

"""Fabrication of the tiny Qwen3 demo bundle: determinism, caching, atomicity, file formats (no torch, no vLLM).

The bundle machinery (cache, manifest, atomic swap, lock) is shared with the miniature Kimi bundle, whose own
files are checked in tests/test_kimi_fabricate.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("safetensors", reason="needs the cpu extra (launchers/setup-cpu.sh)")
pytest.importorskip("tokenizers", reason="needs the cpu extra (launchers/setup-cpu.sh)")

from safetensors import safe_open
from tokenizers import Tokenizer

from kimi_dflash.demo import DemoModels, ensure_demo_models, geometry, layout
from kimi_dflash.demo import bundle as bundle_module
from kimi_dflash.demo.bundle import MANIFEST
from kimi_dflash.demo.bundle import bundle_problem as versioned_bundle_problem
from kimi_dflash.demo.fabricate import fabricate
from repo_paths import REPO_ROOT

CPU_ATTENTION_HEAD_SIZES = {32, 64, 80, 96, 112, 128}
BUNDLE = "qwen3"


def ensure_qwen3(root: Path, **kwargs: object) -> DemoModels:
    return ensure_demo_models(root, choice="qwen3", **kwargs)  # type: ignore[arg-type]


def bundle_problem(bundle: Path) -> str | None:
    return versioned_bundle_problem(bundle, layout.FABRICATION_VERSION)


def tree(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> DemoModels:
    return ensure_qwen3(tmp_path_factory.mktemp("demo"))


@pytest.fixture
def private_copy(built: DemoModels, tmp_path: Path) -> Path:
    """A throwaway copy of the built bundle, for tests that damage it."""
    shutil.copytree(built.root / BUNDLE, tmp_path / BUNDLE)
    return tmp_path


def safetensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    with safe_open(str(path), framework="numpy") as handle:
        names = handle.keys()  # safe_open is not a dict: keys() is its API
        return {name: tuple(handle.get_slice(name).get_shape()) for name in names}


def test_first_build_reports_built_and_passes_its_own_check(built: DemoModels) -> None:
    assert built.built is True
    assert bundle_problem(built.root / BUNDLE) is None
    assert built.target_dir == built.root / BUNDLE / "target"
    assert built.drafter_dir == built.root / BUNDLE / "drafter"


def test_two_builds_in_different_places_are_byte_identical(built: DemoModels, tmp_path: Path) -> None:
    other = ensure_qwen3(tmp_path / "elsewhere")
    first, second = tree(built.root / BUNDLE), tree(other.root / BUNDLE)
    assert set(first) == set(second)
    assert [name for name in first if first[name] != second[name]] == []


def test_build_in_a_fresh_process_is_byte_identical(built: DemoModels, tmp_path: Path) -> None:
    # A new interpreter gets new hash seeds (Python and the Rust tokenizer): output must not depend on them.
    script = REPO_ROOT / "payload" / "fabricate_demo_models.py"
    result = subprocess.run(
        [sys.executable, str(script), "--model", "qwen3", "--root", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert str(tmp_path / BUNDLE / "target") in result.stdout
    assert tree(tmp_path / BUNDLE) == tree(built.root / BUNDLE)


def test_manifest_covers_every_file_with_its_sha256(built: DemoModels) -> None:
    import hashlib

    manifest = built.manifest()
    assert manifest["fabrication_version"] == layout.FABRICATION_VERSION
    files = tree(built.root / BUNDLE)
    listed = manifest["files"]
    assert set(listed) == set(files) - {MANIFEST}
    for name, digest in listed.items():
        assert hashlib.sha256(files[name]).hexdigest() == digest
    expected = {
        "target/config.json",
        "target/generation_config.json",
        "target/model.safetensors",
        "target/tokenizer.json",
        "target/tokenizer_config.json",
        "target/special_tokens_map.json",
        "drafter/config.json",
        "drafter/model.safetensors",
    }
    assert set(listed) == expected


def test_cached_copy_is_reused_without_rewriting(built: DemoModels) -> None:
    before = {p: p.stat().st_mtime_ns for p in (built.root / BUNDLE).rglob("*") if p.is_file()}
    again = ensure_qwen3(built.root)
    assert again.built is False
    assert again.target_dir == built.target_dir
    assert {p: p.stat().st_mtime_ns for p in before} == before


@pytest.mark.parametrize(
    "damage",
    [
        "delete drafter weights",
        "truncate target weights",
        "flip a tokenizer byte",
        "delete manifest",
        "garble manifest",
    ],
)
def test_partial_or_corrupt_copy_is_rebuilt(built: DemoModels, private_copy: Path, damage: str) -> None:
    live = private_copy / BUNDLE
    if damage == "delete drafter weights":
        (live / "drafter" / "model.safetensors").unlink()
    elif damage == "truncate target weights":
        path = live / "target" / "model.safetensors"
        path.write_bytes(path.read_bytes()[:1000])
    elif damage == "flip a tokenizer byte":
        path = live / "target" / "tokenizer.json"
        data = bytearray(path.read_bytes())
        data[100] ^= 1
        path.write_bytes(bytes(data))
    elif damage == "delete manifest":
        (live / MANIFEST).unlink()
    else:
        (live / MANIFEST).write_text("{not json")
    assert bundle_problem(live) is not None
    rebuilt = ensure_qwen3(private_copy)
    assert rebuilt.built is True
    assert tree(live) == tree(built.root / BUNDLE)


def test_copy_from_another_fabrication_version_is_rebuilt(built: DemoModels, private_copy: Path) -> None:
    manifest_path = private_copy / BUNDLE / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["fabrication_version"] = "0-older"
    manifest_path.write_text(json.dumps(manifest))
    assert "fabrication version" in str(bundle_problem(private_copy / BUNDLE))
    assert ensure_qwen3(private_copy).built is True
    assert tree(private_copy / BUNDLE) == tree(built.root / BUNDLE)


def test_force_rebuilds_a_valid_copy(private_copy: Path) -> None:
    assert ensure_qwen3(private_copy, force=True).built is True
    assert bundle_problem(private_copy / BUNDLE) is None
    assert not [p.name for p in private_copy.iterdir() if p.name.startswith((".building-", ".retired-"))]


def test_failed_build_leaves_nothing_half_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, private_copy: Path
) -> None:
    real_write_tree = bundle_module.write_tree

    def write_half_then_fail(directory: Path, files: dict[str, bytes]) -> None:
        real_write_tree(directory, dict(list(files.items())[:3]))
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(bundle_module, "write_tree", write_half_then_fail)

    fresh = tmp_path / "fresh"
    with pytest.raises(OSError, match="disk full"):
        ensure_qwen3(fresh)
    assert not (fresh / BUNDLE).exists()
    assert [p.name for p in fresh.iterdir()] == [".lock"]

    before = tree(private_copy / BUNDLE)
    with pytest.raises(OSError, match="disk full"):
        ensure_qwen3(private_copy, force=True)
    assert tree(private_copy / BUNDLE) == before  # the old, valid copy is still there and untouched
    assert bundle_problem(private_copy / BUNDLE) is None


def test_concurrent_first_use_builds_once_and_both_get_a_valid_copy(tmp_path: Path) -> None:
    results: list[object] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(ensure_qwen3(tmp_path))
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert sorted(r.built for r in results) == [False, True]  # type: ignore[attr-defined]
    assert bundle_problem(tmp_path / BUNDLE) is None


def test_tokenizer_round_trips_any_text_and_has_the_special_tokens(built: DemoModels) -> None:
    tokenizer = Tokenizer.from_file(str(built.target_dir / "tokenizer.json"))
    from kimi_dflash.demo.tokenizer import read_corpus

    samples = (read_corpus(), "Grüße, 世界! 🚀 tabs\tand\nnewlines  double  spaces", "", "<|user|>hi<|assistant|>")
    for text in samples:
        assert tokenizer.decode(tokenizer.encode(text).ids, skip_special_tokens=False) == text
    for expected_id, token in enumerate(layout.SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == expected_id
        assert tokenizer.encode(f"a{token}b").ids[1] == expected_id  # never split into bytes
    # Common words are single tokens (the BPE learned the corpus), unseen ones fall back to bytes.
    assert len(tokenizer.encode(" lighthouse").ids) == 1
    assert tokenizer.get_vocab_size() <= layout.TOKENIZER_VOCAB_SIZE


def test_configs_are_what_transformers_and_vllm_expect(built: DemoModels) -> None:
    target = json.loads((built.target_dir / "config.json").read_text())
    drafter = json.loads((built.drafter_dir / "config.json").read_text())
    tokenizer = Tokenizer.from_file(str(built.target_dir / "tokenizer.json"))
    tokenizer_config = json.loads((built.target_dir / "tokenizer_config.json").read_text())
    generation = json.loads((built.target_dir / "generation_config.json").read_text())

    assert target["architectures"] == ["Qwen3ForCausalLM"] and target["model_type"] == "qwen3"
    assert drafter["architectures"] == ["DFlashDraftModel"] and drafter["model_type"] == "qwen3"
    assert target["head_dim"] in CPU_ATTENTION_HEAD_SIZES
    assert target["vocab_size"] >= tokenizer.get_vocab_size() and target["vocab_size"] % 64 == 0
    # The drafter shares the target's embeddings, lm_head and KV page shape.
    for key in ("vocab_size", "hidden_size", "head_dim", "num_key_value_heads", "rms_norm_eps"):
        assert drafter[key] == target[key], key
    dflash = drafter["dflash_config"]
    assert dflash["mask_token_id"] == tokenizer.token_to_id(layout.MASK_TOKEN)
    assert all(0 <= i < target["num_hidden_layers"] for i in dflash["target_layer_ids"])
    assert dflash["target_layer_ids"] == sorted(set(dflash["target_layer_ids"]))
    assert drafter["num_attention_heads"] >= layout.MAX_NUM_SPECULATIVE_TOKENS
    assert "{%" in tokenizer_config["chat_template"] and tokenizer_config["eos_token"] == layout.EOS_TOKEN
    assert generation["eos_token_id"] == tokenizer.token_to_id(layout.EOS_TOKEN)
    assert not {"temperature", "top_p", "top_k"} & generation.keys()  # vLLM would adopt them as defaults


def test_weight_names_and_shapes_follow_the_dflash_layout(built: DemoModels) -> None:
    drafter = json.loads((built.drafter_dir / "config.json").read_text())
    target = json.loads((built.target_dir / "config.json").read_text())
    shapes = safetensor_shapes(built.drafter_dir / "model.safetensors")
    hidden, head_dim = drafter["hidden_size"], drafter["head_dim"]
    heads, kv_heads = drafter["num_attention_heads"], drafter["num_key_value_heads"]
    inter = drafter["intermediate_size"]
    expected = {
        "fc.weight": (hidden, target["hidden_size"] * len(drafter["dflash_config"]["target_layer_ids"])),
        "hidden_norm.weight": (hidden,),
        "norm.weight": (hidden,),
    }
    for i in range(drafter["num_hidden_layers"]):
        p = f"layers.{i}"
        expected.update(
            {
                f"{p}.input_layernorm.weight": (hidden,),
                f"{p}.post_attention_layernorm.weight": (hidden,),
                f"{p}.self_attn.q_proj.weight": (heads * head_dim, hidden),
                f"{p}.self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
                f"{p}.self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
                f"{p}.self_attn.o_proj.weight": (hidden, heads * head_dim),
                f"{p}.self_attn.q_norm.weight": (head_dim,),
                f"{p}.self_attn.k_norm.weight": (head_dim,),
                f"{p}.mlp.gate_proj.weight": (inter, hidden),
                f"{p}.mlp.up_proj.weight": (inter, hidden),
                f"{p}.mlp.down_proj.weight": (hidden, inter),
            }
        )
    assert shapes == expected  # in particular: no embed_tokens and no lm_head (shared with the target)

    target_shapes = safetensor_shapes(built.target_dir / "model.safetensors")
    assert target_shapes["model.embed_tokens.weight"] == (target["vocab_size"], target["hidden_size"])
    assert target_shapes["lm_head.weight"] == (target["vocab_size"], target["hidden_size"])
    assert len([n for n in target_shapes if n.endswith("q_norm.weight")]) == target["num_hidden_layers"]


def test_speculative_config_helper_checks_its_range(built: DemoModels) -> None:
    assert built.speculative_config(3) == {
        "method": "dflash",
        "model": str(built.drafter_dir),
        "num_speculative_tokens": 3,
    }
    assert built.speculative_config()["num_speculative_tokens"] == built.choice.recommended_num_speculative_tokens
    with pytest.raises(ValueError, match="proposes 1 to 15"):
        built.speculative_config(16)


def test_cli_prints_paths_and_json(built: DemoModels) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kimi_dflash.demo", "--model", "qwen3", "--root", str(built.root), "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["built"] is False and report["target_dir"] == str(built.target_dir)
    assert report["summary"]["mask_token_id"] == 4
    help_text = subprocess.run(
        [sys.executable, "-m", "kimi_dflash.demo", "--help"], check=False, capture_output=True, text=True, timeout=60
    ).stdout
    assert "--force" in help_text and "deterministically" in help_text


def test_cli_reports_an_unwritable_root_without_a_traceback(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = subprocess.run(
        [sys.executable, "-m", "kimi_dflash.demo", "--model", "qwen3", "--root", str(blocker / "demo")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "cannot write the demo models" in result.stderr and "Traceback" not in result.stderr


def test_package_import_stays_light() -> None:
    code = (
        "import sys, kimi_dflash.demo; heavy = {'numpy', 'torch', 'tokenizers', 'safetensors', 'transformers'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr


def neox_rope(vector: np.ndarray, position: int) -> np.ndarray:
    """Independent numpy RoPE (neox halves), as vLLM and transformers apply it to one head."""
    half = layout.HEAD_DIM // 2
    theta = layout.ROPE_THETA ** (-np.arange(half) * 2.0 / layout.HEAD_DIM)
    cos, sin = np.cos(position * theta), np.sin(position * theta)
    first, second = vector[:half], vector[half:]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin])


def normed(vector: np.ndarray) -> np.ndarray:
    return vector / np.sqrt(np.mean(vector**2)) * layout.QK_NORM_WEIGHT


@pytest.mark.parametrize("offset", [0, -1, -4, -15])
def test_rope_patterns_select_exactly_one_relative_position(offset: int) -> None:
    query_position = 3000
    key = normed(geometry.rope_query_pattern(0))
    query = neox_rope(normed(geometry.rope_query_pattern(offset)), query_position)
    keys = range(query_position - 2048, query_position + 16)
    scores = np.array([query @ neox_rope(key, k) for k in keys]) / np.sqrt(layout.HEAD_DIM)
    best = int(np.argmax(scores))
    assert list(keys)[best] - query_position == offset
    runner_up = np.max(np.delete(scores, best))
    assert (
        scores[best] - runner_up
        >= geometry.attention_logit_gap(2048 + 16, layout.HEAD_DIM, layout.ROPE_THETA, layout.QK_NORM_WEIGHT) - 1e-6
    )
    assert scores[best] - runner_up >= layout.MIN_ATTENTION_LOGIT_GAP


def test_phase_codes_rotate_and_stay_distinct() -> None:
    walk = fabricate().walk
    phases = np.arange(walk.length)
    codes = geometry.phase_codes(phases, walk.frequencies, walk.length)
    assert np.allclose(np.linalg.norm(codes, axis=1), 1.0)
    for steps in (1, 5, walk.length - 1):
        rotated = codes @ geometry.phase_rotation(steps, walk.frequencies, walk.length).T
        assert np.allclose(rotated, np.roll(codes, -steps, axis=0))
    similarity = codes @ codes.T
    np.fill_diagonal(similarity, -1.0)
    assert similarity.max() == pytest.approx(walk.max_sidelobe)
    assert walk.max_sidelobe < 0.5  # the lm_head's argmax has a wide margin


def test_walk_covers_the_corpus_and_misses_the_configured_share() -> None:
    walk = fabricate().walk
    assert len(set(walk.cycle)) == walk.length > 500
    assert all(walk.phase[t] == i for i, t in enumerate(walk.cycle))
    assert not set(walk.cycle) & set(range(len(layout.SPECIAL_TOKENS)))
    assert abs(len(walk.missed_phases) / walk.length - layout.DRAFTER_MISS_RATE) < 0.01
    profile = walk.acceptance_profile(8)
    assert profile == sorted(profile, reverse=True) and 0.8 < profile[0] < 0.9

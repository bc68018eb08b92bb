"""Load the demo models into vLLM's own model classes (no server) and check every weight lands where we meant.

    python -m kimi_dflash_lab.demo_vllm_check [--root DIR]

Builds vLLM's engine config for target + DFlash drafter exactly as `vllm serve` would, instantiates
Qwen3ForCausalLM and DFlashQwen3ForCausalLM on CPU, runs their load_weights, and compares each loaded
parameter with the fabricated tensors (vLLM fuses q/k/v and gate/up, so slices are compared). Exits 1 with
a list of problems otherwise. Needs the CPU build of vLLM; takes 20-60 s (vLLM's config resolution).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# vLLM's CPU build is only recognised through the "+cpu" version answer this import installs.
import kimi_dflash.vllm_entry  # noqa: F401  isort: skip

from kimi_dflash.core.options import declare, option, run
from kimi_dflash.launch.serve_sh import free_port

SHARED_WITH_TARGET = ("model.embed_tokens.weight", "lm_head.weight", "model.mask_embedding")


@contextlib.contextmanager
def single_process_vllm(vllm_config: Any, dtype: Any) -> Iterator[None]:
    """vLLM's global config and a one-rank distributed state, so model classes can be built in this process."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import (
        destroy_distributed_environment,
        destroy_model_parallel,
        init_distributed_environment,
        initialize_model_parallel,
    )
    from vllm.utils.torch_utils import set_default_torch_dtype

    with set_current_vllm_config(vllm_config), set_default_torch_dtype(dtype):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo", distributed_init_method=f"tcp://127.0.0.1:{free_port()}"
        )
        initialize_model_parallel(1, 1)
        try:
            yield
        finally:
            destroy_model_parallel()
            destroy_distributed_environment()


def expected_drafter_parameters(weights: dict, config) -> dict:  # type: ignore[no-untyped-def]
    """Our tensor names -> the vLLM parameter (name, row slice) each must be loaded into."""
    q_size = config.num_attention_heads * config.head_dim
    kv_size = config.num_key_value_heads * config.head_dim
    inter = config.intermediate_size
    fused = {
        ".self_attn.q_proj.weight": (".self_attn.qkv_proj.weight", slice(0, q_size)),
        ".self_attn.k_proj.weight": (".self_attn.qkv_proj.weight", slice(q_size, q_size + kv_size)),
        ".self_attn.v_proj.weight": (".self_attn.qkv_proj.weight", slice(q_size + kv_size, q_size + 2 * kv_size)),
        ".mlp.gate_proj.weight": (".mlp.gate_up_proj.weight", slice(0, inter)),
        ".mlp.up_proj.weight": (".mlp.gate_up_proj.weight", slice(inter, 2 * inter)),
    }
    mapping = {}
    for name in weights:
        target = ("model." + name, slice(None))
        for suffix, (fused_suffix, rows) in fused.items():
            if name.endswith(suffix):
                target = ("model." + name[: -len(suffix)] + fused_suffix, rows)
        mapping[name] = target
    return mapping


def check(target_dir: Path, drafter_dir: Path) -> list[str]:
    import torch
    from safetensors.torch import load_file
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.models.qwen3 import Qwen3ForCausalLM
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3ForCausalLM
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
        get_eagle3_aux_layers_from_config,
    )

    speculative_config = {"method": "dflash", "model": str(drafter_dir), "num_speculative_tokens": 4}
    engine_args = EngineArgs(
        model=str(target_dir),
        speculative_config=speculative_config,
        dtype="float32",
        enforce_eager=True,
        max_model_len=2048,
        block_size=32,
    )
    vllm_config = engine_args.create_engine_config()
    problems: list[str] = []
    with single_process_vllm(vllm_config, torch.float32):
        target_weights = load_file(str(target_dir / "model.safetensors"))
        target = Qwen3ForCausalLM(vllm_config=vllm_config)
        loaded = target.load_weights(target_weights.items())
        missing = sorted(set(dict(target.named_parameters())) - set(loaded))
        if missing:
            problems.append(f"target parameters vLLM left unloaded: {missing}")

        drafter_weights = load_file(str(drafter_dir / "model.safetensors"))
        drafter = DFlashQwen3ForCausalLM(vllm_config=vllm_config)
        try:
            drafter.load_weights(drafter_weights.items())
        except (ValueError, AssertionError, KeyError) as error:  # vLLM refuses names/shapes it cannot place
            return [*problems, f"vLLM refused the drafter weights: {error!r}"]
        params = dict(drafter.named_parameters())
        covered = set()
        for ours, (theirs, rows) in expected_drafter_parameters(drafter_weights, drafter.config).items():
            if theirs not in params:
                problems.append(f"drafter tensor {ours}: vLLM has no parameter {theirs}")
                continue
            covered.add(theirs)
            if not torch.equal(params[theirs].data[rows], drafter_weights[ours]):
                problems.append(f"drafter tensor {ours} was not loaded into {theirs}[{rows.start}:{rows.stop}]")
        uncovered = sorted(set(params) - covered - set(SHARED_WITH_TARGET))
        if uncovered:
            problems.append(f"drafter parameters no tensor fills (would stay at init values): {uncovered}")
        if any(drafter.get_draft_attn_causal()):
            problems.append("drafter layers resolved as causal; the construction needs non-causal attention")
        mask_id = drafter.model.mask_token_id
        if mask_id != drafter.config.dflash_config["mask_token_id"]:
            problems.append(f"vLLM reads mask_token_id {mask_id}")
        aux = get_eagle3_aux_layers_from_config(vllm_config.speculative_config)
        print(
            f"vLLM reads target hidden states after layers {list(aux or [])} (dflash ids + 1), "
            f"mask token {mask_id}, {len(loaded)} target and {len(covered)} drafter parameters checked"
        )
    return problems


@dataclass(kw_only=True)
class DemoCheckOptions:
    root: Path | None = option("demo model root (default: project cache)")
    target: Path | None = option("check this target dir instead of the demo's")
    drafter: Path | None = option("check this drafter dir instead of the demo's")


add_cli_args = declare(DemoCheckOptions, __doc__)


def main(args: DemoCheckOptions) -> int:
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("vllm_check: vLLM is not installed (pip install -e .[cpu])", file=sys.stderr)
        return 2
    from kimi_dflash.demo import ensure_demo_models

    if args.target and args.drafter:
        target_dir, drafter_dir = args.target, args.drafter
    else:
        models = ensure_demo_models(args.root, choice="qwen3")
        target_dir, drafter_dir = args.target or models.target_dir, args.drafter or models.drafter_dir
    problems = check(target_dir, drafter_dir)
    for problem in problems:
        print(f"FAIL {problem}")
    print("vllm_check: OK" if not problems else f"vllm_check: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash_lab.demo_vllm_check"))

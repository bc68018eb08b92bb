"""NVIDIA Hopper (sm_90) facts of the MLA path, read per release (issue 27; each rule's `why` has them)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from kimi_dflash.core.checks import Remedy, failed, passed, warned
from kimi_dflash.core.envvars import VLLM_USE_FLASHINFER_SAMPLER
from kimi_dflash.rules import backends
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Fact, Findings, Rule, label
from kimi_dflash.rules.source import SourceLine, VllmSource

MLA = "vllm/v1/attention/backends/mla/"
PREFILL_SELECTOR = MLA + "prefill/selector.py"
TRITON_MLA = MLA + "triton_mla.py"
SAMPLER = "vllm/v1/sample/ops/topk_topp_sampler.py"
DIMS = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _hopper_prefill_backends(source: VllmSource) -> list[str]:
    """The MLA prefill backends for Hopper and older: the `else` of the first `if ...major...` whose else lists
    MLAPrefillBackendEnum members (prefill/selector.py to 0.30; the platform interface from 0.31)."""
    for relpath in (PREFILL_SELECTOR, "vllm/platforms/interface.py"):
        for node in ast.walk(source.tree(relpath) or ast.Module([], [])):
            if isinstance(node, ast.If) and "major" in ast.unparse(node.test):
                text = ast.unparse(ast.Module(node.orelse, []))
                if "MLAPrefillBackendEnum." in text and "major" not in text:
                    return re.findall(r"MLAPrefillBackendEnum\.(\w+)", text)
    return []


def prefill_dims(source: VllmSource) -> tuple[tuple[tuple[int, ...], ...], SourceLine] | None:
    """The (qk_nope, rope, v) shapes the sm_90 MLA prefill backends accept: each Hopper backend's
    `supports_mla_dimensions` MLADimensions(...) (v1/attention/backends/mla/prefill/)."""
    names = _hopper_prefill_backends(source)
    shapes: list[tuple[int, ...]] = []
    where = None
    for name in names:
        relpath = f"{MLA}prefill/{name.lower()}.py"
        nodes = ast.walk(source.tree(relpath) or ast.Module([], []))
        check = next((n for n in nodes if isinstance(n, ast.FunctionDef) and n.name == "supports_mla_dimensions"), None)
        for call in (c for c in ast.walk(check) if isinstance(c, ast.Call)) if check else ():
            values = {k.arg: getattr(k.value, "value", None) for k in call.keywords}
            if all(isinstance(values.get(d), int) for d in DIMS):
                shapes.append(tuple(values[d] for d in DIMS))
                where = where or SourceLine(relpath, check.lineno)
    return None if where is None else (tuple(dict.fromkeys(shapes)), where)


def _prefill_cell(source: VllmSource, _deployment: Deployment) -> str:
    found = prefill_dims(source)
    if found is None:  # a text cell of the matrix, not a figure
        return "-"
    return f"{', '.join(map(str, found[0]))} (`{found[1]}`)"


def _check_prefill_dims(deployment: Deployment, source: VllmSource) -> Findings:
    target = deployment.target
    if deployment.platform != "cuda" or target is None or not target.mla:
        return []
    dims = tuple(target.config.get(d) for d in DIMS)
    found = prefill_dims(source)
    if found is None or not all(isinstance(d, int) for d in dims):
        return []  # no prefill selector (0.20) or no dims: vLLM's own start-up says
    shapes, where = found
    if dims in shapes:
        return passed(f"MLA dims (qk_nope, rope, v) = {dims} have an sm_90 prefill backend ({where})")
    return failed(
        f"MLA dims (qk_nope, rope, v) = {dims}: the sm_90 MLA prefill backend accepts only "
        f"{', '.join(map(str, shapes))} ({where}); {label(source)} stops with 'No valid MLA prefill backend'",
        "use a checkpoint with Kimi's 128/64/128 MLA dims (the CUDA miniature: configs/demo-gpu.env)",
        f"MLA prefill dims {dims} on sm_90",
    )


def _block_sizes(source: VllmSource, relpath: str, cls: str) -> tuple[int, ...] | None:
    """A backend's get_supported_kernel_block_sizes when it lists fixed sizes (MultipleOf(n): None, any multiple)."""
    function = source.function(relpath, f"{cls}.get_supported_kernel_block_sizes")
    returned = next((n.value for n in ast.walk(function) if isinstance(n, ast.Return)), None) if function else None
    if not isinstance(returned, ast.List) or not all(isinstance(e, ast.Constant) for e in returned.elts):
        return None
    return tuple(e.value for e in returned.elts)


def hopper_mla_backend(deployment: Deployment, source: VllmSource) -> tuple[str, str] | None:
    """The MLA backend the CUDA selector gives the target on sm_90 for the plan's KV dtype and block size, and why:
    the first of the platform's non-Blackwell list whose class runs on major 9, takes the dtype and the block size."""
    block = deployment.command.value("--block-size")
    for member in backends.mla_backends(source, "cuda", aiter_mla=False) or ():
        found = backends.backend_class(source, member)
        if found is None or "SPARSE" in member:
            continue
        capability = source.function(found[0], f"{found[1]}.supports_compute_capability")
        if capability is not None and "True" not in ast.unparse(capability) and "9" not in ast.unparse(capability):
            continue
        if deployment.kv_cache_dtype not in (backends.backend_kv_dtypes(source, member) or ("auto",)):
            continue
        sizes = _block_sizes(source, *found)
        if block is not None and sizes is not None and int(block) not in sizes:
            continue
        return member, f"{found[0]}" + ("" if sizes is None else f" (block sizes {list(sizes)})")
    return None


def _check_fp8_kv(deployment: Deployment, source: VllmSource) -> Findings:
    target, dtype = deployment.target, deployment.kv_cache_dtype
    if deployment.platform != "cuda" or target is None or not target.mla or not dtype.startswith("fp8"):
        return []
    picked = hopper_mla_backend(deployment, source)
    flashmla = backends.backend_class(source, "FLASHMLA")
    sizes = list(_block_sizes(source, *flashmla) or ()) if flashmla else None
    needs = "" if sizes is None else f"FLASHMLA takes FP8 KV with block sizes {sizes}"
    if picked is None or picked[0] == "FLASHMLA":
        return passed(f"FP8 KV on sm_90: FLASHMLA ({needs}; FLASH_ATTN_MLA takes no FP8 KV)")
    return failed(
        f"FP8 KV on sm_90 with --block-size {deployment.command.value('--block-size')}: FLASH_ATTN_MLA takes no "
        f"FP8 KV and {needs}, so {label(source)} gives the target {picked[0]} ({picked[1]}), an unmeasured decode "
        "path; vLLM starts",
        "BLOCK_SIZE=64 (configs/demo-gpu-fp8kv.env)",
        f"FP8 KV on {picked[0]}, not FLASHMLA",
    )


def triton_mla_decode(source: VllmSource) -> tuple[bool, SourceLine] | None:
    """Whether TRITON_MLA decodes a verify step (1 + k tokens) as decode: its metadata builder sets
    `query_len_support` (0.31+: UNIFORM); without it, MLA's common builder's SINGLE_ONLY applies."""
    if not source.has(TRITON_MLA):
        return None
    if line := source.line_of(TRITON_MLA, "query_len_support"):
        return True, line
    return False, source.line_of(TRITON_MLA, "_cudagraph_support") or SourceLine(TRITON_MLA, None)


def _triton_cell(source: VllmSource, _deployment: Deployment) -> str:
    found = triton_mla_decode(source)
    if found is None:  # a text cell of the matrix, not a figure
        return "-"
    return f"{'1 + k per step' if found[0] else 'one token per step'} (`{found[1]}`)"


def _check_triton_mla_decode(deployment: Deployment, source: VllmSource) -> Findings:
    k, target = deployment.num_speculative_tokens, deployment.target
    if not k or target is None or not target.mla or deployment.platform not in ("cuda", "rocm"):
        return []
    explicit = deployment.command.value("--attention-backend")
    if deployment.platform == "rocm":
        on_triton = explicit == "TRITON_MLA" or (explicit is None and not deployment.aiter_mla)
    else:
        picked = hopper_mla_backend(deployment, source)
        on_triton = explicit == "TRITON_MLA" or (explicit is None and picked is not None and picked[0] == "TRITON_MLA")
    found = triton_mla_decode(source) if on_triton else None
    if found is None:
        return []
    decodes, where = found
    if decodes:
        return passed(f"the target runs on TRITON_MLA, which decodes a verify step of 1 + {k} tokens ({where})")
    return warned(
        f"the target runs on TRITON_MLA, which in {label(source)} decodes one token per step ({where}: no "
        f"query_len_support): each verify step of 1 + {k} tokens goes to the prefill path, and FULL graphs are "
        "downgraded to PIECEWISE; slower, not wrong (vLLM 0.31.0 decodes it)",
        "vLLM >= 0.31.0, or the platform's other MLA backend (CUDA: FLASHMLA/FLASH_ATTN_MLA; ROCm: AITER MLA)",
    )


SAMPLER_OFF = Remedy("env", VLLM_USE_FLASHINFER_SAMPLER, "0")  # vLLM's own top-k/top-p sampler


def _check_flashinfer_sampler(deployment: Deployment, source: VllmSource) -> Findings:
    crash = source.line_of(SAMPLER, "from vllm.v1.attention.backends.flashinfer import")
    if deployment.platform != "cuda" or crash is None:
        return []
    value = deployment.env.get(VLLM_USE_FLASHINFER_SAMPLER)
    if value is not None and not deployment.env_true(VLLM_USE_FLASHINFER_SAMPLER):
        return passed(f"{VLLM_USE_FLASHINFER_SAMPLER}={value}: the sampler does not import flashinfer ({crash})")
    installed = Path(source.origin).parent  # site-packages of an installed vLLM (a wheel: unknown, not judged)
    if not Path(source.origin).is_dir() or (installed / "flashinfer").is_dir():
        return passed(f"the sampler imports flashinfer ({crash}), which is installed beside this vLLM or not judged")
    missing = f"no flashinfer beside this vLLM ({installed}): {label(source)} crashes building its sampler ({crash})"
    if value is None and deployment.option_keys:  # a launcher's plan: serve sets it
        return passed(f"{missing} unless {VLLM_USE_FLASHINFER_SAMPLER}=0, which serve sets", (SAMPLER_OFF,))
    detail = f"{VLLM_USE_FLASHINFER_SAMPLER}={value}: {missing}: No module named 'flashinfer'"
    fix = f"unset {VLLM_USE_FLASHINFER_SAMPLER} (serve then sets it to 0), or install flashinfer"
    return failed(detail, fix, "flashinfer sampler without flashinfer")


RULES = (
    Rule(
        "mla prefill dims",
        "on sm_90 the target's MLA head dims have a prefill backend",
        "Hopper's MLA prefill is FLASH_ATTN only, for (qk_nope, rope, v) in (128,64,128), (192,64,256), (64,64,128); "
        "other dims stop start-up with 'No valid MLA prefill backend'.",
        "_get_mla_prefill_backend_priorities (v1/attention/backends/mla/prefill/selector.py) and each backend's "
        "supports_mla_dimensions (prefill/flash_attn.py)",
        "Kimi's 128/64/128 MLA dims",
        _check_prefill_dims,
        facts=(Fact("sm_90 MLA prefill dims (qk_nope, rope, v)", _prefill_cell),),
    ),
    Rule(
        "cuda fp8 kv",
        "FP8 KV on sm_90 lands on FLASHMLA (block size 64)",
        "FLASH_ATTN_MLA takes no FP8 KV; FLASHMLA takes it with block size 64 only; otherwise the selector falls to "
        "TRITON_MLA.",
        "the CUDA selector's MLA list (platforms/cuda.py), each backend's supported_kv_cache_dtypes, "
        "get_supported_kernel_block_sizes and supports_compute_capability",
        "BLOCK_SIZE=64 with KV_CACHE_DTYPE=fp8",
        _check_fp8_kv,
        silent_at_startup="vLLM starts on the next backend that takes FP8 KV (TRITON_MLA); only its backend line says",
    ),
    Rule(
        "triton mla decode",
        "TRITON_MLA decodes a verify step as decode",
        "Before 0.31 TRITON_MLA's builder had no query_len_support: one token per decode step, so a verify step of "
        "1 + k tokens went to the prefill path and FULL graphs fell to PIECEWISE.",
        "TritonMLAMetadataBuilder.query_len_support / _cudagraph_support (v1/attention/backends/mla/triton_mla.py)",
        "vLLM >= 0.31.0 or another MLA backend",
        _check_triton_mla_decode,
        silent_at_startup="a decode path and a graph mode chosen per step; vLLM logs the PIECEWISE downgrade",
        facts=(Fact("TRITON_MLA verify decode", _triton_cell),),
    ),
    Rule(
        "flashinfer sampler",
        "on CUDA the sampler does not need a flashinfer that is absent",
        "vLLM's top-k/top-p sampler imports flashinfer's backend unless VLLM_USE_FLASHINFER_SAMPLER=0; without "
        "flashinfer start-up crashes. serve sets it to 0 when no flashinfer is installed beside vLLM.",
        "flashinfer_sampler_supported (v1/sample/ops/topk_topp_sampler.py); flashinfer beside the vLLM judged",
        "VLLM_USE_FLASHINFER_SAMPLER=0",
        _check_flashinfer_sampler,
        silent_at_startup="the dry engine stops before the sampler is built",
    ),
)

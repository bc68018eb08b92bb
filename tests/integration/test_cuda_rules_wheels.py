"""The Hopper rules' source facts read from the real wheels (issue 27 item 2; rules/catalog/cuda_mla.py). Expected
lines were read by hand in each wheel: 0.26.0's `_get_mla_prefill_backend_priorities` (prefill/selector.py) gives
sm_90 FLASH_ATTN only, whose `supports_mla_dimensions` (prefill/flash_attn.py:55) lists (128,64,128),
(192,64,256), (64,64,128); FlashMLABackend.get_supported_kernel_block_sizes returns [64] (flashmla.py:59);
FlashAttnMLABackend takes no fp8 KV; TritonMLAMetadataBuilder has no query_len_support before 0.31.0 (0.26.0:
`_cudagraph_support = UNIFORM_SINGLE_TOKEN_DECODE`, triton_mla.py:51) and UNIFORM from 0.31.0 (line 55); the
sampler imports flashinfer's backend at topk_topp_sampler.py:44 unless VLLM_USE_FLASHINFER_SAMPLER=0."""

from __future__ import annotations

import pytest

from kimi_dflash.rules import backends
from kimi_dflash.rules.catalog.cuda_mla import SAMPLER, prefill_dims, triton_mla_decode
from kimi_dflash.rules.source import VllmSource
from kimi_dflash_lab.wheels import source_wheel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sources() -> dict[str, VllmSource]:
    return {v: VllmSource.from_wheel(source_wheel(v)) for v in ("0.26.0", "0.30.0", "0.31.0", "0.33.0")}


def test_vllm_0_26_hopper_facts_at_their_lines(sources: dict[str, VllmSource]) -> None:
    v26 = sources["0.26.0"]
    shapes, where = prefill_dims(v26) or ((), None)
    assert set(shapes) == {(128, 64, 128), (192, 64, 256), (64, 64, 128)}
    assert str(where) == "vllm/v1/attention/backends/mla/prefill/flash_attn.py:55"
    assert "fp8" not in (backends.backend_kv_dtypes(v26, "FLASH_ATTN_MLA") or ())
    assert "fp8" in (backends.backend_kv_dtypes(v26, "FLASHMLA") or ())
    assert str(v26.line_of("vllm/v1/attention/backends/mla/flashmla.py", "return [64]")).endswith("flashmla.py:59")
    assert str(v26.line_of(SAMPLER, "from vllm.v1.attention.backends.flashinfer import")).endswith(":44")


def test_triton_mla_decodes_a_verify_step_from_0_31(sources: dict[str, VllmSource]) -> None:
    decodes = {version: (triton_mla_decode(source) or (None, None)) for version, source in sources.items()}
    assert decodes["0.26.0"][0] is False and str(decodes["0.26.0"][1]).endswith("triton_mla.py:51")
    assert decodes["0.30.0"][0] is False
    assert decodes["0.31.0"][0] is True and str(decodes["0.31.0"][1]).endswith("triton_mla.py:55")
    assert decodes["0.33.0"][0] is True

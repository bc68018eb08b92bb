"""The miniature Kimi's construction, checked in-process in transformers' own DeepSeek-V3 (no vLLM), for both
miniatures: the CPU one (one MLA head, qk_nope 64, v 64) and the CUDA one (8 heads, Kimi's 128 / 128).

The target's greedy output walks the corpus cycle with a wide logit margin; MLA attention and the MoE carry the
token's code (remove either and the walk breaks); the routing (sigmoid scores, correction bias) sets the logit
scale but never the argmax; the drafter, in a plain-torch transcription of vLLM's DFlash forward, is right exactly
where the construction says. On the CUDA miniature, head 0 alone carries the code: a kernel that mixed heads up
would break the walk.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from kimi_dflash.demo import DemoModels, ensure_demo_models
from kimi_dflash.demo.kimi import layout
from kimi_dflash.demo.kimi.fabricate import fabricate, fabricate_cuda
from kimi_dflash.demo.walk import Walk
from kimi_dflash.drafter_training.features import load_kimi_text_model
from kimi_dflash_lab.demo_reference import (
    AgreementReport,
    agreement_by_prompt,
    chat_prompt_ids,
    draft_is_right,
    greedy_generate,
    next_token,
)

# Prompts whose walks start in different places (a short prompt is mostly chat template, so e.g. "Hello" starts
# where "Tell me about the harbor." does).
PROMPTS = ("Tell me about the harbor.", "Describe the market on Saturday morning.", "What is 2+2?")
NEW_TOKENS = 40
SLOTS = 6


@dataclass(frozen=True)
class Kimi:
    models: DemoModels
    walk: Walk
    target: Any  # transformers' DeepseekV3ForCausalLM with the miniature's text weights
    mla: layout.MlaGeometry


MINIATURES = {"kimi": (fabricate, layout.CPU_MLA), "kimi-cuda": (fabricate_cuda, layout.CUDA_MLA)}


@pytest.fixture(scope="module", params=sorted(MINIATURES))
def kimi(request: pytest.FixtureRequest) -> Iterator[Kimi]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add contention with other processes
    make, mla = MINIATURES[request.param]
    # The project cache's copy (built once, checked against its manifest; tests/unit/demo pins a fabrication's bytes
    # to its version): these tests only read it.
    models = ensure_demo_models(choice=request.param)
    yield Kimi(models, make().walk, load_kimi_text_model(models.target_dir), mla)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def reports(kimi: Kimi) -> dict[str, AgreementReport]:
    return agreement_by_prompt(kimi.models, PROMPTS, NEW_TOKENS, SLOTS, kimi.target)


def walk_share(walk: Walk, tokens: list[int]) -> float:
    return sum(next_token(walk, a) == b for a, b in pairwise(tokens)) / (len(tokens) - 1)


def generate(model: Any, prompt_ids: list[int], new_tokens: int = 24) -> list[int]:
    return greedy_generate(model, prompt_ids, new_tokens)[len(prompt_ids) :]


def test_greedy_output_walks_the_cycle_with_a_wide_margin(kimi: Kimi, reports: dict[str, AgreementReport]) -> None:
    for prompt, report in reports.items():
        assert walk_share(kimi.walk, report.generated) == 1.0, prompt
        ids = chat_prompt_ids(kimi.models.target_dir, prompt) + report.generated
        with torch.no_grad():
            logits = kimi.target(torch.tensor([ids])).logits[0, -NEW_TOKENS:-1]
        top = logits.topk(2, dim=-1).values
        assert float((top[:, 0] - top[:, 1]).min()) > 10.0  # float32 and bfloat16 noise are far below this


def test_output_depends_on_the_prompt(reports: dict[str, AgreementReport]) -> None:
    assert len({report.generated[0] for report in reports.values()}) == len(PROMPTS)


def ablated(kimi: Kimi, edit: Any) -> Any:
    """A copy of the target with `edit(state_dict)` applied."""
    import copy

    model = copy.deepcopy(kimi.target)
    state = model.state_dict()
    with torch.no_grad():
        edit(state)
    return model


def test_mla_attention_carries_the_code(kimi: Kimi) -> None:
    """Without head 0's value path (the latent -> v rows of kv_b_proj) nothing reaches F, and the walk breaks."""
    mla = kimi.mla

    def cut(state: dict) -> None:
        for index in range(layout.TARGET_LAYERS):
            rows = slice(mla.qk_nope_head_dim, mla.qk_nope_head_dim + mla.v_head_dim)
            state[f"model.layers.{index}.self_attn.kv_b_proj.weight"][rows] = 0.0

    prompt = chat_prompt_ids(kimi.models.target_dir, PROMPTS[0])
    assert walk_share(kimi.walk, generate(ablated(kimi, cut), prompt)) < 0.2


def test_heads_stay_apart(kimi: Kimi) -> None:
    """Every head but 0 is noise into N: swapping head 0's and head 1's value outputs (what a kernel that mixed
    up heads would do) breaks the walk; silencing heads 1.. changes the logits but no greedy token."""
    mla = kimi.mla
    if mla.num_heads == 1:
        pytest.skip("the CPU miniature has one head")
    v = mla.v_head_dim

    def swap(state: dict) -> None:
        for index in range(layout.TARGET_LAYERS):
            o = state[f"model.layers.{index}.self_attn.o_proj.weight"]
            o[:, : 2 * v] = torch.cat([o[:, v : 2 * v], o[:, :v]], dim=1).clone()

    def silence(state: dict) -> None:
        for index in range(layout.TARGET_LAYERS):
            state[f"model.layers.{index}.self_attn.o_proj.weight"][:, v:] = 0.0

    prompt = chat_prompt_ids(kimi.models.target_dir, PROMPTS[0])
    assert walk_share(kimi.walk, generate(ablated(kimi, swap), prompt)) < 0.2
    ids = torch.tensor([prompt + generate(kimi.target, prompt)])
    quiet = ablated(kimi, silence)
    with torch.no_grad():
        steps = slice(len(prompt), None)
        original, changed = kimi.target(ids).logits[0, steps], quiet(ids).logits[0, steps]
    assert torch.equal(original.argmax(-1), changed.argmax(-1))
    assert float((original - changed).abs().max()) > 1e-3


def test_moe_experts_carry_the_code(kimi: Kimi) -> None:
    """lm_head reads only G, which only the experts write: silence their copy and the walk breaks."""

    def cut(state: dict) -> None:
        for name, value in state.items():
            if ".mlp.experts.down_proj" in name or ".mlp.shared_experts.down_proj" in name:
                value[..., layout.G, :] = 0.0  # fused experts: [experts, hidden, inter]; shared: [hidden, inter]

    prompt = chat_prompt_ids(kimi.models.target_dir, PROMPTS[0])
    assert walk_share(kimi.walk, generate(ablated(kimi, cut), prompt)) < 0.2


def test_routing_sets_the_scale_not_the_argmax(kimi: Kimi) -> None:
    """Changing the correction bias changes which experts run and so every logit, never the greedy token of a
    walk step (the first reply token, picked from the prompt's average, has no such margin)."""

    def reroute(state: dict) -> None:
        for name, value in state.items():
            if name.endswith("e_score_correction_bias"):
                value.copy_(value.flip(0))

    prompt = chat_prompt_ids(kimi.models.target_dir, PROMPTS[0])
    rerouted = ablated(kimi, reroute)
    ids = torch.tensor([prompt + generate(kimi.target, prompt)])
    with torch.no_grad():
        steps = slice(len(prompt), None)  # positions whose next token is a walk step
        original, changed = kimi.target(ids).logits[0, steps], rerouted(ids).logits[0, steps]
    assert torch.equal(original.argmax(-1), changed.argmax(-1))
    assert float((original - changed).abs().max()) > 0.1


def test_drafter_is_right_exactly_where_the_construction_says(kimi: Kimi, reports: dict[str, AgreementReport]) -> None:
    for report in reports.values():
        for anchor, row in zip(report.generated, report.slot_right, strict=True):
            assert row == [draft_is_right(kimi.walk, anchor, slot) for slot in range(1, SLOTS + 1)]


def test_acceptance_is_high_at_the_demos_speculative_tokens(reports: dict[str, AgreementReport]) -> None:
    k = 4  # configs/demo-cpu.env
    positions = [sum(r.accepted_per_position[i] for r in reports.values()) / len(reports) for i in range(SLOTS)]
    assert sum(positions[:k]) / k >= 0.5
    assert all(a >= b for a, b in pairwise(positions)) and positions[-1] < positions[0]

"""The demo target and drafter agree, shown in-process without vLLM; and the drafter-training stand-in trains exactly
the forward vLLM serves (the lab's transcription is the reference).

The target runs in transformers' Qwen3 (the real architecture code), the drafter in a plain-torch forward that
follows vLLM's DFlash semantics. The tests check the construction's promises exactly: the target's greedy
output walks the corpus cycle, and the drafter is right on precisely the slots the construction says.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from kimi_dflash.demo import DemoModels, ensure_demo_models
from kimi_dflash.demo.fabricate import fabricate
from kimi_dflash.demo.walk import Walk
from kimi_dflash.drafter_training.features import target_features
from kimi_dflash_lab.demo_reference import (
    AgreementReport,
    DrafterReference,
    agreement_by_prompt,
    chat_prompt_ids,
    draft_is_right,
    load_target,
    next_token,
)

PROMPTS = ("Tell me about the harbor.", "Describe the market on Saturday morning.", "Hello")
NEW_TOKENS = 48
SLOTS = 6


@dataclass(frozen=True)
class Demo:
    models: DemoModels
    walk: Walk  # the construction's own account of what the models do
    target: Any  # transformers' Qwen3ForCausalLM with the fabricated weights


@pytest.fixture(scope="module")
def demo() -> Iterator[Demo]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add contention with other processes
    models = ensure_demo_models(choice="qwen3")  # the project cache's copy: these tests only read it
    yield Demo(models, fabricate().walk, load_target(models.target_dir))
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def reports(demo: Demo) -> dict[str, AgreementReport]:
    return agreement_by_prompt(demo.models, PROMPTS, NEW_TOKENS, SLOTS, demo.target)


def test_transformers_loads_every_target_weight(demo: Demo) -> None:
    from transformers import Qwen3ForCausalLM

    models = demo.models
    _, info = Qwen3ForCausalLM.from_pretrained(str(models.target_dir), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]


def test_chat_template_renders_roles_and_rejects_unknown_ones(demo: Demo) -> None:
    from transformers import AutoTokenizer

    models = demo.models
    tokenizer = AutoTokenizer.from_pretrained(str(models.target_dir))
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "More"},
    ]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|system|>Be brief.<|user|>Hi<|assistant|>Hello<|endoftext|><|user|>More<|assistant|>"
    with pytest.raises(Exception, match="not tool"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)


def test_target_greedy_output_walks_the_cycle(demo: Demo, reports: dict[str, AgreementReport]) -> None:
    walk = demo.walk
    for report in reports.values():
        generated = report.generated
        assert len(set(generated)) == len(generated)  # a walk over distinct tokens: no loops, no repeats
        assert all(next_token(walk, a) == b for a, b in pairwise(generated))


def test_target_output_depends_on_the_prompt(reports: dict[str, AgreementReport]) -> None:
    first_tokens = {report.generated[0] for report in reports.values()}
    assert len(first_tokens) == len(PROMPTS)


def test_drafter_is_right_exactly_where_the_construction_says(demo: Demo, reports: dict[str, AgreementReport]) -> None:
    walk = demo.walk
    checked = 0
    for report in reports.values():
        for anchor, row in zip(report.generated, report.slot_right, strict=True):
            assert row == [draft_is_right(walk, anchor, slot) for slot in range(1, SLOTS + 1)]
            checked += 1
    assert checked == NEW_TOKENS * len(PROMPTS)


def test_acceptance_is_high_and_decays_by_position(reports: dict[str, AgreementReport]) -> None:
    positions = [sum(r.accepted_per_position[k] for r in reports.values()) / len(reports) for k in range(SLOTS)]
    assert positions[0] > 0.7  # a random drafter gets 0
    assert all(a >= b for a, b in pairwise(positions))
    assert positions[-1] < positions[0]  # the deliberate misses make later positions harder, as with real drafters


def test_drafts_depend_on_the_bonus_token_not_on_the_context(demo: Demo) -> None:
    # Same bonus token after two different contexts -> same drafts: the proposal comes from the bonus token,
    # which is why it tracks the target (whose next token depends only on the current one once it generates).
    models, walk, model = demo.models, demo.walk, demo.target
    drafter = DrafterReference.load(models.drafter_dir, models.target_dir)
    layer_ids = list(drafter.config["dflash_config"]["target_layer_ids"])
    bonus = walk.cycle[10]
    drafts = []
    for prompt in ("Hello", "A much longer and quite different prompt about bridges and rain."):
        ids = chat_prompt_ids(models.target_dir, prompt)
        _, features = target_features(model, ids, layer_ids)
        drafts.append(drafter.propose(features, bonus, SLOTS))
    assert drafts[0] == drafts[1]
    expected = [walk.cycle[(10 + k) % walk.length] for k in range(1, SLOTS + 1)]
    assert [d == e for d, e in zip(drafts[0], expected)] == [
        draft_is_right(walk, bonus, k) for k in range(1, SLOTS + 1)
    ]


def test_trainable_forward_equals_the_vllm_transcription_on_the_demo_drafter() -> None:
    """The stand-in trains exactly the function vLLM serves: with the demo drafter's weights, every block of a
    batched forward equals the lab's demo_reference (a step-by-step transcription of vLLM's DFlash forward)."""
    from kimi_dflash.drafter_training.export import target_embeddings
    from kimi_dflash.drafter_training.model import DFlashDrafter
    from kimi_dflash_lab.demo_reference import load_safetensors

    models = ensure_demo_models(choice="kimi")
    config = json.loads((models.drafter_dir / "config.json").read_text())
    embed, head = target_embeddings(models.target_dir)
    weights = {k: v.float() for k, v in load_safetensors(models.drafter_dir / "model.safetensors").items()}
    reference = DrafterReference(weights=weights, config=config, embed_tokens=embed, lm_head=head)
    model = DFlashDrafter(config, embed, head)
    model.load_state_dict(weights)
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(40, embed.shape[1] * 2, generator=generator)
    ids = torch.randint(0, 900, (40,), generator=generator)
    anchors = torch.tensor([5, 17, 30])
    with torch.no_grad():
        drafts = model.block_logits(features, ids, anchors).argmax(-1)
    for row, anchor in enumerate(anchors.tolist()):
        assert drafts[row].tolist() == reference.propose(features[:anchor], int(ids[anchor]), config["block_size"] - 1)

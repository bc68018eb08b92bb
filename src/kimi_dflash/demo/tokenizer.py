"""The demo tokenizers: byte-level BPE trained on the shipped corpus (deterministic across processes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimi_dflash.demo import layout
from kimi_dflash.demo.encoding import json_bytes, shipped_text

if TYPE_CHECKING:
    from tokenizers import Tokenizer


def read_corpus() -> str:
    return shipped_text("corpus.txt")


def chat_template(name: str) -> str:
    """data/demo/<name>.jinja, its lines joined: the template is one line (no whitespace around special tokens)."""
    return "".join(shipped_text(f"{name}.jinja").splitlines())


def byte_level_bpe(corpus: str, vocab_size: int, special_tokens: list[str]) -> Tokenizer:
    """Byte-level BPE trained on `corpus` (both demos' tokenizers), `special_tokens` at ids 0.. in order."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,  # an upper bound: BPE stops when no pair occurs twice
        min_frequency=layout.TOKENIZER_MIN_FREQUENCY,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([corpus], trainer=trainer)
    return tokenizer


def train_tokenizer(corpus: str) -> Tokenizer:
    """The Qwen3 demo's: the special tokens at ids 0..len(SPECIAL_TOKENS)-1."""
    tokenizer = byte_level_bpe(corpus, layout.TOKENIZER_VOCAB_SIZE, list(layout.SPECIAL_TOKENS))
    for expected_id, token in enumerate(layout.SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected_id:
            raise RuntimeError(f"special token {token} got id {tokenizer.token_to_id(token)}, expected {expected_id}")
    return tokenizer


def tokenizer_files(
    tok: Tokenizer, roles: dict[str, str | None], extra: list[str], template: str, max_length: int, **config: object
) -> dict[str, bytes]:
    """File name -> content for the tokenizer part of an HF model directory. `roles`: bos/eos/pad/unk_token."""
    config = {
        **roles,
        **config,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
        "chat_template": template,
    }
    special_map = {role: token for role, token in roles.items() if token is not None}
    return {
        "tokenizer.json": tok.to_str(pretty=True).encode("utf-8") + b"\n",
        "tokenizer_config.json": json_bytes(config),
        "special_tokens_map.json": json_bytes({**special_map, "additional_special_tokens": extra}),
    }

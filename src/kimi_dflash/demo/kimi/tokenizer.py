"""The miniature Kimi tokenizer: byte-level BPE plus Kimi K2.6's 256-id special block, no remote code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kimi_dflash.demo.encoding import kimi_config_fragment
from kimi_dflash.demo.kimi import layout
from kimi_dflash.demo.tokenizer import byte_level_bpe, chat_template, tokenizer_files

if TYPE_CHECKING:
    from tokenizers import Tokenizer


# Offsets inside the special block as in Kimi K2.6's tokenizer; the rest are <|reserved_token_N|>.
SPECIAL_OFFSETS: dict[str, int] = kimi_config_fragment("special_token_offsets")


def special_block() -> list[str]:
    """The 256 special tokens in id order: Kimi's named ones at their offsets, reserved names elsewhere."""
    by_offset = {offset: token for token, offset in SPECIAL_OFFSETS.items()}
    return [
        by_offset.get(offset, f"<|reserved_token_{layout.SPECIAL_BASE + offset}|>")
        for offset in range(layout.SPECIAL_BLOCK)
    ]


def special_id(token: str) -> int:
    return layout.SPECIAL_BASE + SPECIAL_OFFSETS[token]


def train_tokenizer(corpus: str) -> tuple[Tokenizer, int]:
    """(tokenizer, n ordinary BPE tokens): ids 0..n-1, reserved fillers n..BASE-1, specials BASE..BASE+255."""
    tokenizer = byte_level_bpe(corpus, layout.SPECIAL_BASE, [])
    ordinary = tokenizer.get_vocab_size()
    if ordinary > layout.SPECIAL_BASE:
        raise RuntimeError(f"{ordinary} BPE tokens do not fit below the special block at {layout.SPECIAL_BASE}")
    fillers = [f"<|reserved_token_{i}|>" for i in range(ordinary, layout.SPECIAL_BASE)]
    tokenizer.add_special_tokens([*fillers, *special_block()])
    for token, offset in SPECIAL_OFFSETS.items():
        if tokenizer.token_to_id(token) != layout.SPECIAL_BASE + offset:
            raise RuntimeError(f"special token {token} got id {tokenizer.token_to_id(token)}")
    if tokenizer.get_vocab_size() != layout.VOCAB_SIZE:
        raise RuntimeError(f"tokenizer has {tokenizer.get_vocab_size()} ids, expected {layout.VOCAB_SIZE}")
    return tokenizer, ordinary


def kimi_tokenizer_files(tokenizer: Tokenizer) -> dict[str, bytes]:
    """File name -> content for the tokenizer part of the checkpoint directory."""
    roles = dict(
        bos_token=layout.BOS_TOKEN, eos_token=layout.EOS_TOKEN, pad_token=layout.PAD_TOKEN, unk_token=layout.MASK_TOKEN
    )
    additional = [token for token in SPECIAL_OFFSETS if token not in roles.values()]
    template = chat_template("kimi-chat-template")
    return tokenizer_files(tokenizer, roles, additional, template, layout.MAX_POSITION_EMBEDDINGS, add_bos_token=False)

"""The demo tokenizer: byte-level BPE trained with `tokenizers` on the corpus shipped in the package.

Training is deterministic for a given corpus (checked by the tests across processes); the files written
here are what transformers' AutoTokenizer and vLLM load.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from kimi_dflash.demo import layout
from kimi_dflash.demo.encoding import json_bytes

if TYPE_CHECKING:
    from tokenizers import Tokenizer

CORPUS_RESOURCE = ("kimi_dflash", "data/demo/corpus.txt")

# One special token per role and no whitespace around them, so the prompt ends
# "...last user words<|assistant|>". Unknown roles fail loudly instead of being dropped.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}"
    + layout.SYSTEM_TOKEN
    + "{%- elif message['role'] == 'user' -%}"
    + layout.USER_TOKEN
    + "{%- elif message['role'] == 'assistant' -%}"
    + layout.ASSISTANT_TOKEN
    + "{%- else -%}{{ raise_exception('The demo chat template supports the roles system, user and "
    "assistant, not ' ~ message['role']) }}"
    "{%- endif -%}"
    "{{ message['content'] or '' }}"
    "{%- if message['role'] == 'assistant' -%}" + layout.EOS_TOKEN + "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}" + layout.ASSISTANT_TOKEN + "{%- endif -%}"
)


def read_corpus() -> str:
    """The shipped training text (written for this project)."""
    package, name = CORPUS_RESOURCE
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def train_tokenizer(corpus: str) -> Tokenizer:
    """Byte-level BPE with the special tokens at ids 0..len(SPECIAL_TOKENS)-1."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=layout.TOKENIZER_VOCAB_SIZE,
        min_frequency=layout.TOKENIZER_MIN_FREQUENCY,
        special_tokens=list(layout.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([corpus], trainer=trainer)
    for expected_id, token in enumerate(layout.SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected_id:
            raise RuntimeError(f"special token {token} got id {tokenizer.token_to_id(token)}, expected {expected_id}")
    return tokenizer


def tokenizer_files(tokenizer: Tokenizer) -> dict[str, bytes]:
    """File name -> content for the tokenizer part of an HF model directory."""
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": layout.EOS_TOKEN,
        "pad_token": layout.EOS_TOKEN,
        "unk_token": None,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": layout.MAX_POSITION_EMBEDDINGS,
        "chat_template": CHAT_TEMPLATE,
    }
    special_map = {
        "eos_token": layout.EOS_TOKEN,
        "pad_token": layout.EOS_TOKEN,
        "additional_special_tokens": list(layout.SPECIAL_TOKENS[1:]),
    }
    return {
        "tokenizer.json": tokenizer.to_str(pretty=True).encode("utf-8") + b"\n",
        "tokenizer_config.json": json_bytes(config),
        "special_tokens_map.json": json_bytes(special_map),
    }

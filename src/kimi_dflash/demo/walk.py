"""The cycle the target walks, each token's phase on it, and the drafter's deliberate misses (pure numpy)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kimi_dflash.demo import layout

NO_PHASE = -1  # special tokens and padding ids


@dataclass(frozen=True)
class Walk:
    """Everything the weights are built from, besides the constants in layout."""

    tokenizer_size: int
    vocab_size: int  # config vocab_size: tokenizer size padded up
    cycle: tuple[int, ...]  # token ids in walk order; the target emits cycle[p + 1] after a token at phase p
    phase: np.ndarray  # int64 [vocab_size]: phase of every ordinary token, NO_PHASE for the rest
    frequencies: np.ndarray  # int64 [NUM_FREQUENCIES]: integer frequencies of the Fourier phase code
    max_sidelobe: float  # largest cosine similarity between the codes of two different phases
    missed_phases: np.ndarray  # int64, sorted: residual phases the drafter gets wrong on purpose

    @property
    def length(self) -> int:
        return len(self.cycle)

    def describe(self) -> str:
        misses = f"{len(self.missed_phases)} deliberate drafter misses"
        return f"cycle of {self.length} tokens, phase code sidelobe {self.max_sidelobe:.3f}, {misses}"

    def acceptance_profile(self, max_slots: int) -> list[float]:
        """Share of cycle phases from which the drafter's first k proposals are all right, k = 1..max_slots:
        the per-position acceptance a long greedy generation converges to."""
        missed = np.zeros(self.length, dtype=bool)
        missed[self.missed_phases] = True
        all_right = np.ones(self.length, dtype=bool)
        profile = []
        for slot in range(1, max_slots + 1):
            all_right &= ~np.roll(missed, -(slot - 1))  # phase p0 + slot - 1 not missed
            profile.append(float(all_right.mean()))
        return profile


def assign_phases(cycle: Sequence[int], tokenizer_size: int, vocab_size: int, special_ids: set[int]) -> np.ndarray:
    """Cycle tokens get their position; other ordinary tokens (never emitted) a fixed pseudo-random phase so a
    prompt ending in them still continues somewhere deterministic."""
    length = len(cycle)
    phase = np.full(vocab_size, NO_PHASE, dtype=np.int64)
    for token_id in range(tokenizer_size):
        if token_id not in special_ids:
            phase[token_id] = (token_id * 7919) % length
    for position, token_id in enumerate(cycle):
        phase[token_id] = position
    return phase


def sidelobes(frequencies: np.ndarray, length: int) -> np.ndarray:
    """Cosine similarity of phase codes at every nonzero phase distance (unit codes, so peak = 1)."""
    distances = np.arange(1, length)
    angles = 2.0 * np.pi * np.outer(distances, frequencies) / length
    return np.cos(angles).mean(axis=1)


def choose_frequencies(length: int) -> tuple[np.ndarray, float]:
    """Seeded search for the frequency set whose phase codes are the most distinct (lowest sidelobe)."""
    count = layout.NUM_FREQUENCIES
    if length // 2 - 1 < count:
        raise ValueError(f"the cycle has {length} tokens; the phase code needs at least {2 * count + 2}")
    rng = np.random.default_rng(layout.FREQUENCY_SEED)
    best: np.ndarray | None = None
    best_lobe = np.inf
    for _ in range(layout.FREQUENCY_CANDIDATES):
        candidate = np.sort(rng.choice(np.arange(1, length // 2), size=count, replace=False)).astype(np.int64)
        lobe = float(sidelobes(candidate, length).max())
        if lobe < best_lobe:
            best, best_lobe = candidate, lobe
    assert best is not None
    return best, best_lobe


def choose_missed_phases(length: int) -> np.ndarray:
    rng = np.random.default_rng(layout.MISS_SEED)
    count = round(layout.DRAFTER_MISS_RATE * length)
    return np.sort(rng.choice(length, size=count, replace=False)).astype(np.int64)


def build_walk(
    corpus_ids: Sequence[int], tokenizer_size: int, special_ids: set[int] | None = None, vocab_size: int | None = None
) -> Walk:
    """The walk over `corpus_ids`. Ids below `tokenizer_size` that are not in `special_ids` are ordinary tokens
    (they get a phase); the defaults are the Qwen3 demo's (specials first, vocab padded up)."""
    if special_ids is None:
        special_ids = set(range(len(layout.SPECIAL_TOKENS)))
    # Distinct ids in order of first appearance: the corpus with repeats dropped still reads like text.
    cycle = tuple(dict.fromkeys(token for token in corpus_ids if token not in special_ids))
    if vocab_size is None:
        vocab_size = -(-tokenizer_size // layout.VOCAB_PAD_MULTIPLE) * layout.VOCAB_PAD_MULTIPLE
    frequencies, max_sidelobe = choose_frequencies(len(cycle))
    return Walk(
        tokenizer_size=tokenizer_size,
        vocab_size=vocab_size,
        cycle=cycle,
        phase=assign_phases(cycle, tokenizer_size, vocab_size, special_ids),
        frequencies=frequencies,
        max_sidelobe=max_sidelobe,
        missed_phases=choose_missed_phases(len(cycle)),
    )

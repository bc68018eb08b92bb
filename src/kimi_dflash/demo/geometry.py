"""Vectors and matrices the weights are assembled from: phase codes, their rotations, RoPE attention patterns."""

from __future__ import annotations

import numpy as np

from kimi_dflash.demo import layout


def phase_codes(phases: np.ndarray, frequencies: np.ndarray, length: int) -> np.ndarray:
    """Unit Fourier codes [len(phases), F_DIMS]: pair i holds (cos, sin) of 2*pi*f_i*phase/length."""
    angles = 2.0 * np.pi * np.outer(np.asarray(phases, dtype=np.float64), frequencies) / length
    codes = np.empty((len(angles), layout.F_DIMS), dtype=np.float64)
    codes[:, 0::2] = np.cos(angles)
    codes[:, 1::2] = np.sin(angles)
    return codes / np.sqrt(layout.NUM_FREQUENCIES)


def phase_rotation(steps: int, frequencies: np.ndarray, length: int) -> np.ndarray:
    """The F_DIMS x F_DIMS map taking the code of phase p to the code of phase p + steps."""
    rotation = np.zeros((layout.F_DIMS, layout.F_DIMS), dtype=np.float64)
    for pair, frequency in enumerate(frequencies):
        angle = 2.0 * np.pi * frequency * steps / length
        c, s = np.cos(angle), np.sin(angle)
        i = 2 * pair
        rotation[i : i + 2, i : i + 2] = [[c, -s], [s, c]]
    return rotation


def rope_frequencies(head_dim: int = layout.HEAD_DIM, theta: float = layout.ROPE_THETA) -> np.ndarray:
    """RoPE angular frequencies per rotary pair, as vLLM and transformers compute them (default rope)."""
    exponents = np.arange(0, head_dim, 2, dtype=np.float64) / head_dim
    return 1.0 / (theta**exponents)


def rope_query_pattern(offset: int, head_dim: int = layout.HEAD_DIM, theta: float = layout.ROPE_THETA) -> np.ndarray:
    """A query (before RoPE, neox layout) that, against the key rope_query_pattern(0), scores highest for the key
    `offset` positions away (negative = earlier) wherever they are: with RoPE, q.k = sum_i Re(conj(q_i) k_i
    e^{i(n-m)theta_i}), so k_i = 1 and q_i = e^{i*offset*theta_i} give sum_i cos((n - m - offset) * theta_i)."""
    frequencies = rope_frequencies(head_dim, theta)
    half = head_dim // 2
    pattern = np.empty(head_dim, dtype=np.float64)
    pattern[:half] = np.cos(offset * frequencies)
    pattern[half:] = np.sin(offset * frequencies)
    return pattern


def attention_logit_gap(max_distance: int, head_dim: int, theta: float, qk_norm_weight: float) -> float:
    """Smallest logit margin between the intended key and any other key at most `max_distance` away: after
    q_norm/k_norm (weight w) each rotary pair has length sqrt(2)*w, and vLLM scales scores by
    head_dim**-0.5, so a key x positions off the intended one loses (w^2/4)*sum_i(1 - cos(x*theta_i))."""
    frequencies = rope_frequencies(head_dim, theta)
    distances = np.arange(1, max_distance + 1, dtype=np.float64)
    loss = (1.0 - np.cos(np.outer(distances, frequencies))).sum(axis=1)
    pair_length_sq = 2.0 * qk_norm_weight**2
    return float(pair_length_sq * loss.min() / np.sqrt(head_dim))


def checked_attention_gap(
    what: str, fix: str, max_distance: int, head_dim: int, theta: float, qk_norm_weight: float, minimum: float
) -> float:
    """attention_logit_gap, refused below `minimum`: positional attention must stay sharp over the whole context."""
    gap = attention_logit_gap(max_distance, head_dim, theta, qk_norm_weight)
    if gap < minimum:
        raise RuntimeError(f"{what} positional attention margin {gap:.1f} < {minimum}: {fix}")
    return gap

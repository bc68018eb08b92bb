"""Prometheus text parsing and spec-decode window deltas (acceptance rate, tau, per position)."""

from __future__ import annotations

import pytest

from kimi_dflash.bench import prometheus

TEXT = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="kimi"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="kimi"} 50.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="kimi"} 1.7e9
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="kimi"} 200.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="kimi"} 100.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="kimi"} 90.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="kimi"} 45.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="kimi",position="0"} 60.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="kimi",position="1"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="kimi",position="0"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="kimi",position="1"} 15.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="other"} 999.0
vllm:cache_config_info{block_size="16",cache_dtype="fp8",enable_prefix_caching="False",engine="0"} 1.0
weird_line_without_value
vllm:odd{note="has \\"quotes\\", commas, {braces}"} 3 1700000000000
"""


def test_parse_labels_with_escapes_and_timestamps() -> None:
    samples = prometheus.parse_samples(TEXT)
    odd = next(s for s in samples if s.name == "vllm:odd")
    assert odd.labels == {"note": 'has "quotes", commas, {braces}'}
    assert odd.value == 3.0
    assert not any(s.name == "weird_line_without_value" for s in samples)


def test_counters_sum_engines_and_filter_model() -> None:
    c = prometheus.spec_counters(prometheus.parse_samples(TEXT), model="kimi")
    assert c is not None
    assert (c.drafts, c.draft_tokens, c.accepted) == (150.0, 300.0, 135.0)
    assert c.accepted_per_pos == {0: 90.0, 1: 45.0}
    # a model name no series carries: everything counts
    assert prometheus.spec_counters(prometheus.parse_samples(TEXT), model="unknown").drafts == 150.0 + 999.0


def test_delta_definitions() -> None:
    before = prometheus.SpecCounters(drafts=100, draft_tokens=200, accepted=50, accepted_per_pos={0: 40, 1: 10})
    after = prometheus.SpecCounters(drafts=300, draft_tokens=600, accepted=306, accepted_per_pos={0: 168, 1: 88})
    spec, status = prometheus.spec_delta(before, after)
    assert status == "ok" and spec is not None
    assert spec.acceptance_rate == pytest.approx(256 / 400)  # accepted / draft tokens
    assert spec.acceptance_length == pytest.approx(1 + 256 / 200)  # 1 + accepted / drafts
    assert spec.per_position == pytest.approx([128 / 200, 78 / 200])  # accepted at k / drafts
    assert (spec.drafts, spec.draft_tokens, spec.accepted_tokens, spec.num_speculative_tokens) == (200, 400, 256, 2)


def test_delta_statuses() -> None:
    c = prometheus.SpecCounters(drafts=5, draft_tokens=10, accepted=3, accepted_per_pos={0: 3})
    assert prometheus.spec_delta(None, None) == (None, "absent")
    assert prometheus.spec_delta(c, c) == (None, "no_drafts")
    restarted = prometheus.SpecCounters(drafts=1, draft_tokens=2, accepted=0, accepted_per_pos={0: 0})
    assert prometheus.spec_delta(c, restarted) == (None, "counter_reset")


def test_no_spec_counters_means_no_speculation() -> None:
    assert prometheus.spec_counters(prometheus.parse_samples("vllm:num_requests_running 3\n")) is None


def test_cache_config_labels() -> None:
    assert prometheus.cache_config(prometheus.parse_samples(TEXT)) == {
        "block_size": "16",
        "cache_dtype": "fp8",
        "enable_prefix_caching": "False",
    }

"""``GET /metrics``: the server's counters in Prometheus text, named and labelled as vLLM names them."""

from __future__ import annotations

from synthetic_server.schedule import Schedule
from synthetic_server.stats import Stats


def render(schedule: Schedule, stats: Stats) -> str:
    labels = f'engine="0",model_name="{schedule.model}"'
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} {float(stats.streams_active)}",
    ]
    if schedule.spec_tokens > 0:
        for name, value in (
            ("num_drafts", stats.drafts),
            ("num_draft_tokens", stats.draft_tokens),
            ("num_accepted_tokens", stats.accepted),
        ):
            lines += [
                f"# HELP vllm:spec_decode_{name} Synthetic spec-decode counter.",
                f"# TYPE vllm:spec_decode_{name} counter",
                f"vllm:spec_decode_{name}_total{{{labels}}} {float(value)}",
                f"vllm:spec_decode_{name}_created{{{labels}}} 1.7e9",
            ]
        lines += [
            "# HELP vllm:spec_decode_num_accepted_tokens_per_pos Accepted tokens per draft position.",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        ]
        for pos, value in enumerate(stats.accepted_per_pos):
            series = f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{pos}"}}'
            lines.append(f"{series} {float(value)}")
    return "\n".join(lines) + "\n"

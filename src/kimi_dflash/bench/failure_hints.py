"""When every warmup request failed: the likely cause and its fix, from the commonest failure (pure)."""

from __future__ import annotations

from kimi_dflash.bench import records

CONTEXT_WORDS = ("context length", "maximum model length", "max_model_len")  # vLLM's 400s for a too-long request
UNREADABLE_ANSWERS = frozenset(
    {records.BAD_RESPONSE, records.MALFORMED_SSE, records.TRUNCATED_STREAM, records.EMPTY_RESPONSE}
)


def cause(reason: str, detail: str, model: str | None) -> str:
    """The likely cause of ``reason`` (a RequestRecord failure reason) and what to do about it."""
    lowered = detail.lower()
    if reason == "http_400":
        if any(word in lowered for word in CONTEXT_WORDS):
            return (
                "the server refused the request as longer than the model's context: lower --max-tokens, "
                "--turns-per-session or --shared-prefix-tokens, or use shorter prompts"
            )
        return (
            "the server refused the request as invalid: check --extra-body, --max-tokens and --temperature "
            "against what the server accepts"
        )
    if reason in ("http_401", "http_403"):
        return "the server wants an API key: pass --api-key or set OPENAI_API_KEY (or VLLM_API_KEY)"
    if reason in ("http_404", "http_405"):
        return (
            f"the server does not serve this endpoint for model {model!r}: check --model, --endpoint "
            "(chat or completions) and the path in --base-url"
        )
    if reason.startswith("http_5") or reason == records.SERVER_ERROR_EVENT:
        return "the server failed while answering: read the server log"
    if reason == "http_429":
        return "the server is rate limiting: lower --warmup or ask for a higher limit"
    if reason in records.CONNECTION_FAILURES:
        return "the server stopped answering during the warmup: check that it is still running and read its log"
    if reason == records.TIMEOUT:
        return "no answer within --timeout: the server may be overloaded or stuck; raise --timeout or read its log"
    if reason in UNREADABLE_ANSWERS:
        return "the answers could not be read as completions: check --endpoint and --base-url (is it vLLM?)"
    if reason == records.CLIENT_OUT_OF_RESOURCES:
        return "this machine ran out of descriptors, ports or memory, not the server: raise ulimit -n or free memory"
    if reason == records.CLIENT_ERROR:
        return "the error was raised on this machine, not by the server: the detail says what"
    return "read the server log"


def warmup_failed(requests: int, failures: dict[str, int], examples: dict[str, str], model: str | None) -> str:
    reason = max(failures, key=lambda r: failures[r]) if failures else "unknown"
    detail = examples.get(reason, "")
    return f"all {requests} warmup requests failed ({reason}: {detail}). Likely cause: {cause(reason, detail, model)}."

"""What the server says about itself: ``/version``, ``/v1/models`` and the config labels on ``/metrics``."""

from __future__ import annotations

import aiohttp

from kimi_dflash.bench import client, prometheus
from kimi_dflash.bench.records import CONNECTION_REFUSED
from kimi_dflash.bench.result import ServerInfo
from kimi_dflash.core import redaction
from kimi_dflash.core.errors import UserError


def choose_model(requested: str | None, served: list[str], models_url: str) -> str:
    """The model to benchmark: ``--model`` when given (it must be served), else the only model served."""
    if requested is not None:
        if served and requested not in served:
            raise UserError(f"--model {requested!r} is not served here; the server has: {', '.join(served)}.")
        return requested
    if not served:
        raise UserError(f"{models_url} lists no models; pass --model.")
    if len(served) > 1:
        raise UserError(f"{models_url} serves {len(served)} models ({', '.join(served)}); choose one with --model.")
    return served[0]


async def probe(
    session: aiohttp.ClientSession, endpoint: client.Endpoint, model: str | None, metrics_url: str | None
) -> tuple[ServerInfo, str]:
    """(server info, model to use); UserError when the server is unreachable or the model is not (uniquely) served."""
    models_url = f"{endpoint.base_url}/v1/models"
    try:
        listing = await client.get_json(session, models_url, endpoint.api_key)
    except aiohttp.ClientResponseError as exc:
        hint = " Check --api-key (or OPENAI_API_KEY)." if exc.status in (401, 403) else ""
        raise UserError(f"{models_url} answered HTTP {exc.status} {exc.message}.{hint}") from None
    except Exception as exc:  # noqa: BLE001 - any transport failure means "cannot reach"
        reason, detail = client.classify_exception(exc)
        what = "connection refused: nothing is listening there" if reason == CONNECTION_REFUSED else detail
        raise UserError(
            f"cannot reach the server at {endpoint.base_url} ({what}). Is vLLM running and is --base-url right?"
        ) from None
    served = [m for m in (listing.get("data") or []) if isinstance(m, dict)] if isinstance(listing, dict) else []
    model = choose_model(model, [str(m.get("id")) for m in served], models_url)

    info = ServerInfo(base_url=endpoint.base_url, models=served, version=None)
    try:
        version = await client.get_json(session, f"{endpoint.base_url}/version", endpoint.api_key)
        version = version.get("version") if isinstance(version, dict) else version
        info.version = None if version is None else str(version)
    except Exception as exc:  # noqa: BLE001 - optional endpoint
        info.version_error = client.classify_exception(exc)[1]
    info.metrics_url = redaction.redact_query(metrics_url) if metrics_url else None  # what the result may keep
    if metrics_url:
        try:
            samples = prometheus.parse_samples(await client.get_text(session, metrics_url, endpoint.api_key))
            info.cache_config = prometheus.cache_config(samples)
            info.spec_decode_counters = prometheus.spec_counters(samples, model) is not None
        except Exception as exc:  # noqa: BLE001 - metrics are optional; the report says why they are missing
            info.metrics_error = redaction.redact_query(client.classify_exception(exc)[1])  # may quote the URL
    return info, model


def max_model_len(info: ServerInfo, model: str) -> int | None:
    """The context length /v1/models reports for ``model`` (vLLM's ``max_model_len``), if any."""
    for entry in info.models:
        value = entry.get("max_model_len")
        if entry.get("id") == model and isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


async def scrape_spec(
    session: aiohttp.ClientSession, metrics_url: str | None, api_key: str | None, model: str
) -> tuple[prometheus.SpecCounters | None, str | None]:
    """Spec-decode counters now, or (None, error detail) if /metrics could not be read."""
    if not metrics_url:
        return None, "metrics disabled (--metrics-url none)"
    try:
        text = await client.get_text(session, metrics_url, api_key)
    except Exception as exc:  # noqa: BLE001
        return None, client.classify_exception(exc)[1]
    return prometheus.spec_counters(prometheus.parse_samples(text), model), None

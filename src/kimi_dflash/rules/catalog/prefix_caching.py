"""DFlash with prefix caching (vllm #47930): vLLM gives no warning."""

from __future__ import annotations

import re

from kimi_dflash.core.checks import failed, passed, warned
from kimi_dflash.core.envvars import ALLOW_DFLASH_PREFIX_CACHING
from kimi_dflash.rules.deployment import Deployment
from kimi_dflash.rules.model import Fact, Findings, Rule, label
from kimi_dflash.rules.source import SourceLine, VllmSource

V1_DFLASH = "vllm/v1/spec_decode/dflash.py"
V2_DFLASH_DIR = "vllm/v1/worker/gpu/spec_decode/dflash/"
CPU_PLATFORM = "vllm/platforms/cpu.py"
# PR #47926's fix: DFlash counts a request's restored tokens (prefix cache, KV connector, preemption) and masks them out
# of the draft context. Any such count in the DFlash code marks the fix; 0.20-0.33 have none.
_PREFIX_FIX_RE = re.compile(r"\b\w*(?:restored|num_cached|cache_hit|prefix_hit)\w*\b", re.IGNORECASE)


def dflash_sources(source: VllmSource) -> tuple[str, ...]:
    """Both runners: v1/spec_decode/dflash.py (V1), v1/worker/gpu/spec_decode/dflash/ (V2)."""
    return (*([V1_DFLASH] if source.has(V1_DFLASH) else []), *source.paths(V2_DFLASH_DIR))


def dflash_prefix_fix(source: VllmSource) -> SourceLine | None:
    """The shape of the #47926 fix (counting restored tokens); None: the bug of #47930 stands."""
    for path in dflash_sources(source):
        for number, line in enumerate((source.text(path) or "").splitlines(), 1):
            if _PREFIX_FIX_RE.search(line.split("#", 1)[0]):
                return SourceLine(path, number)
    return None


def prefix_caching_default(source: VllmSource) -> bool | None:
    """vllm/config/cache.py: what a command line without either flag gets."""
    value, _ = source.class_constants("vllm/config/cache.py", "CacheConfig").get("enable_prefix_caching", (None, 0))
    return value if isinstance(value, bool) else None


def prefix_caching_on(deployment: Deployment, source: VllmSource) -> bool:
    """The plan's last --[no-]enable-prefix-caching, else vLLM's default (CacheConfig, True in every release)."""
    flags = [o for o in deployment.command.options if o in ("--enable-prefix-caching", "--no-enable-prefix-caching")]
    return flags[-1] == "--enable-prefix-caching" if flags else prefix_caching_default(source) is not False


def _check_prefix_caching(deployment: Deployment, source: VllmSource) -> Findings:
    if not deployment.dflash or not prefix_caching_on(deployment, source):
        return []
    target = deployment.target
    cpu_off = source.line_of(CPU_PLATFORM, "enable_prefix_caching = False")
    if deployment.platform == "cpu" and target is not None and target.mla and cpu_off is not None:
        return passed(f"prefix caching on, but the CPU platform turns it off for MLA models ({cpu_off})")
    fixed = dflash_prefix_fix(source)
    if fixed is not None:
        return passed(f"prefix caching with DFlash: the drafter masks restored tokens ({fixed}; vllm #47926)")
    where = ", ".join(dflash_sources(source)) or "no DFlash source"
    detail = (
        f"prefix caching is on with DFlash, and {label(source)}'s DFlash code ({where}) has no count of tokens "
        "restored from the prefix cache: their drafter context is never written, and the drafter attends to stale "
        "KV there, so acceptance falls toward 1.0 as cache hits grow (vllm #47930, reported AL 2.98 -> 1.25; fix "
        "PR #47926 open). vLLM gives no warning"
    )
    if deployment.env_true(ALLOW_DFLASH_PREFIX_CACHING):
        return warned(detail + "; allowed by ALLOW_DFLASH_PREFIX_CACHING=true")
    return failed(
        detail,
        f"turn prefix caching off ({deployment.blame('--enable-prefix-caching')}), or set "
        "ALLOW_DFLASH_PREFIX_CACHING=true to accept the loss (the check then warns)",
        "DFlash + prefix caching (#47930)",
    )


RULES = (
    Rule(
        "dflash prefix caching",
        "DFlash with prefix caching only where the drafter handles restored tokens",
        "Tokens restored from the prefix cache never get drafter context; acceptance falls toward 1.0.",
        "a count of restored tokens in v1/spec_decode/dflash.py and v1/worker/gpu/spec_decode/dflash/; "
        "CacheConfig.enable_prefix_caching's default; the CPU platform's MLA override",
        "ENABLE_PREFIX_CACHING=false, or ALLOW_DFLASH_PREFIX_CACHING=true",
        _check_prefix_caching,
        silent_at_startup="vLLM accepts prefix caching with DFlash and gives no warning; acceptance falls only as "
        "cache hits grow",
        upstream=("vllm #47930", "vllm #47926 (fix, open)"),
        facts=(Fact("DFlash prefix-cache fix (#47926)", lambda s, _: dflash_prefix_fix(s)),),
    ),
)

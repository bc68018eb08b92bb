"""`kimi-dflash patch`: list, check, apply, revert, diff (exit codes in the epilog; 3 is also a held lock or an I/O
error)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Literal

from kimi_dflash.core.options import declare, option
from kimi_dflash.patcher import engine
from kimi_dflash.patcher.model import PatcherError
from kimi_dflash.patcher.registry import PATCHES

_DESCRIPTION = """\
Feature-probed, self-retiring vLLM source patches for DFlash next to an MLA target on ROCm.

Each patch probes the source for its upstream fix (never the version string): `retired` when the fix is
there, `pending` when the exact old code is, `applied` when our code and marker are, else `unrecognised`
(the tree is refused, nothing written). Prefer the vLLM plugin (installed with this project): it applies
the runtime-capable patches in every vLLM process without editing site-packages. Use `apply` for the
file-only patch (triton-noncausal) or for images that must not depend on the plugin.
"""

_EPILOG = """\
commands:
  list     describe every patch in the registry
  check    status table; exit 0 none needed, 1 pending, 2 unrecognised
  apply    apply all pending patches at once (idempotent)
  revert   restore byte-identical originals of patched files
  diff     unified diff of pending (would apply) and applied changes
exit codes: 0 nothing needed/done, 1 pending (check), 2 unrecognised source, 3 cannot write
examples:
  %(prog)s check                      # status table of the installed vllm
  %(prog)s apply && %(prog)s check    # patch, then prove nothing is left pending
  %(prog)s diff --vllm-root /opt/vllm-copy/vllm
  %(prog)s revert --json
"""


@dataclass(kw_only=True)
class PatchOptions:
    command: Literal["list", "check", "apply", "revert", "diff"] = option(
        "what to do (below)", positional=True, required=True, metavar="COMMAND"
    )
    vllm_root: str | None = option(
        "the `vllm` package directory to inspect or patch (default: the installed vllm, found without importing it)",
        metavar="DIR",
    )
    json: bool = option("machine-readable output on stdout")
    only: list[str] = option(
        "restrict to this patch id (repeatable); see `list`", flag="--patch", repeatable=True, metavar="ID"
    )


add_cli_args = declare(PatchOptions, _DESCRIPTION, _EPILOG)


def _json(payload: dict[str, object]) -> str:
    return json.dumps(payload, indent=2)


def _list(args: PatchOptions) -> int:
    patches = [p for p in PATCHES if not args.only or p.id in args.only]
    if args.json:
        print(_json({"patches": [p.to_json() for p in patches]}))
        return 0
    for p in patches:
        print(f"{p.id}: {p.title}")
        print(f"  why:       {p.why}")
        print(f"  needed:    {p.needed_when}")
        print(f"  retired:   upstream PR {p.upstream_pr}, vLLM >= {p.upstream_since}")
        for probe in p.retired_when:
            print(f"  probe:     {probe.description} (vllm/{probe.path})")
        print(f"  delivery:  {p.delivery}")
        print(f"  files:     {', '.join('vllm/' + f for f in p.files) or '-'}")
        print()
    return 0


def _check(args: PatchOptions) -> int:
    table = engine.status_table(args.vllm_root, args.only)
    print(_json(table.to_json()) if args.json else table.to_text())
    return table.exit_code


def _change(args: PatchOptions) -> int:
    action = engine.apply_pending if args.command == "apply" else engine.revert_applied
    result = action(args.vllm_root, args.only)
    if args.json:
        print(_json(result.to_json()))
    else:
        verb = "patched" if args.command == "apply" else "restored"
        changed = [f"{verb} vllm/{path}" for path in result.changed_files]
        print("\n".join(changed) or f"nothing to {args.command}: no file changed")
        print(result.after.to_text())
    return 0


def _diff(args: PatchOptions) -> int:
    text = engine.diff(args.vllm_root, args.only)
    if args.json:
        print(_json({"diff": text}))
    else:
        sys.stdout.write(text or "no differences: nothing pending or applied\n")
    return 0


_COMMANDS = {"list": _list, "check": _check, "apply": _change, "revert": _change, "diff": _diff}


def main(args: PatchOptions) -> int:
    try:
        return _COMMANDS[args.command](args)
    except PatcherError as exc:
        if args.json:
            print(_json({"error": str(exc), "exit_code": exc.exit_code}))
        print(f"kimi-dflash patch: error: {exc}", file=sys.stderr)
        return exc.exit_code

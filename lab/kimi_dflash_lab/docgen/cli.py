"""`python -m kimi_dflash_lab docs`: regenerate every generated section of a checkout's docs in one go (tests
compare each with its generator; run it after changing the config schema, the result model or a result file)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.doc_sections import MissingMarkers
from kimi_dflash.core.options import declare, option
from kimi_dflash_lab import matrix
from kimi_dflash_lab.docgen import config_reference, result_schema

EPILOG = """regenerates, in the checkout at --root, without the network:
  docs/configuration.md              the config reference, from the config schema (config/schema.py)
  docs/benchmark.md                  the result-file reference, from the result model (bench/result.py)
  docs/benchmark-result.schema.json  the result file's JSON Schema, from the same model
  docs/compatibility.md, README.md   the rules table (from the rules' declarations), the vLLM compatibility matrix,
                                     the runtime facts and README's "Which vLLM" (from the committed per-release
                                     facts, lab/kimi_dflash_lab/compat_releases.json)
  README.md Results                  the result tables, from benchmarks/results/ (kimi-dflash results)

not here (each its own lab command, minutes): reading a new vLLM release into the per-release facts
(python -m kimi_dflash_lab matrix --write; downloads vLLM wheels), the dry-engine table
(python -m kimi_dflash_lab.dry_engine.table --write).
exit codes: 0 all regenerated; 1 a page lacks its markers; 2 not a checkout, or the result tables failed
(the message says why)."""


@dataclass(kw_only=True)
class DocsOptions:
    root: Path = option("repository checkout (default: .)", default=Path("."))


add_cli_args = declare(DocsOptions, __doc__, EPILOG)


def steps(root: Path) -> list[tuple[str, Callable[[], list[Path]]]]:
    """(name, write) of each generator, in the order they run."""
    docs = root / "docs"
    return [
        ("config reference", lambda: config_reference.write(root / config_reference.PAGE)),
        ("result schema", lambda: result_schema.write(docs)),
        ("compatibility", lambda: matrix.write_docs(root / matrix.DOC, root / matrix.README)),
    ]


def main(args: DocsOptions) -> int:
    root: Path = args.root
    if not (root / "README.md").is_file() or not (root / "src" / "kimi_dflash").is_dir():
        print(f"docs: {root.resolve()} is not a kimi-k26-dflash checkout; pass --root", file=sys.stderr)
        return 2
    import kimi_dflash

    package = Path(kimi_dflash.__file__).resolve().parent
    if package != (root / "src" / "kimi_dflash").resolve():
        print(f"docs: this kimi_dflash is {package}, not {root}'s: run with PYTHONPATH={root / 'src'}", file=sys.stderr)
        return 2
    for name, write in steps(root):
        try:
            written = write()
        except MissingMarkers as error:
            print(f"docs: {name}: {error}", file=sys.stderr)
            return 1
        print(f"docs: {name} regenerated ({', '.join(map(str, written))})", file=sys.stderr)
    from kimi_dflash import results_cli

    return results_cli.main(results_cli.ResultsOptions(directory=root / "benchmarks/results", write=root / "README.md"))

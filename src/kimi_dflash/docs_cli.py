"""`kimi-dflash docs`: regenerate every generated section of a checkout's docs in one go (tests compare each
with its generator): the config reference from the config schema, the result-file reference and JSON Schema from
the result model, README's result tables from benchmarks/results/. The vLLM compatibility matrix is the lab's
(python -m kimi_dflash_lab matrix --write; downloads vLLM wheels: minutes)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from kimi_dflash.core.options import declare, option, run


@dataclass(kw_only=True)
class DocsOptions:
    root: Path = option("repository checkout (default: .)", default=Path("."))


add_cli_args = declare(DocsOptions, __doc__)


def steps(root: Path) -> list[tuple[str, str, list[str]]]:
    """(name, module, argv) of each generator."""
    docs = root / "docs"
    return [
        ("config reference", "kimi_dflash.config.reference", ["--write", "--readme", str(docs / "configuration.md")]),
        ("result schema", "kimi_dflash.bench.result_schema", ["--write", "--docs", str(docs)]),
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
    for name, module, argv in steps(root):
        code = run(module, argv)
        if code:
            print(f"docs: {name} failed (exit {code})", file=sys.stderr)
            return code
        print(f"docs: {name} regenerated", file=sys.stderr)
    from kimi_dflash import results_cli

    return results_cli.main(results_cli.ResultsOptions(directory=root / "benchmarks/results", write=root / "README.md"))


if __name__ == "__main__":
    sys.exit(run(__name__, prog="python -m kimi_dflash.docs_cli"))

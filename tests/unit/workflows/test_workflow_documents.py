"""Every document the workflows read back is typed, and the package reaches nothing outside itself (issue 26):
no ``dict[str, Any]`` (nor a bare ``dict`` or ``Any``) in the signatures of qualify/ and sweep/, no
``Path(__file__).parents[...]`` into a checkout, and each typed document refuses what it cannot read."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from kimi_dflash.core.errors import UserError
from kimi_dflash.fp8.validate import BenchSummary, Fp8Report, MathSummary, report_lines
from kimi_dflash.launch.serve_sh import RunningServer
from kimi_dflash.sweep.state import Failure
from kimi_dflash.validate.engine import AgreementSummary
from repo_paths import REPO_ROOT

SRC = REPO_ROOT / "src" / "kimi_dflash"
UNTYPED = re.compile(r"\bAny\b|\bdict\b(?!\[)|\bDict\b|\bobject\b")


def _annotations(tree: ast.AST) -> list[tuple[int, str]]:
    """Every annotation of a function's parameters and return, and of a class's fields."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            params = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
            found += [(node.lineno, ast.unparse(a.annotation)) for a in params if a is not None and a.annotation]
            found += [(node.lineno, ast.unparse(node.returns))] if node.returns else []
        elif isinstance(node, ast.ClassDef):
            found += [(f.lineno, ast.unparse(f.annotation)) for f in node.body if isinstance(f, ast.AnnAssign)]
    return found


@pytest.mark.parametrize("package", ["qualify", "sweep"])
def test_no_untyped_dicts_in_the_signatures_of_the_workflows(package: str) -> None:
    loose = [
        f"{path.relative_to(SRC)}:{line}: {text}"
        for path in sorted((SRC / package).glob("*.py"))
        for line, text in _annotations(ast.parse(path.read_text(encoding="utf-8")))
        if UNTYPED.search(text)
    ]
    assert loose == [], "typed models instead:\n" + "\n".join(loose)


def test_the_package_reaches_into_no_checkout() -> None:
    """Data the package needs ships inside it; a checkout is reached only where a command is told its root."""
    reaching = [
        f"{path.relative_to(SRC)}:{number}"
        for path in sorted(SRC.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"__file__\)?(\.resolve\(\))?\.(parents\[|parent\.parent)", line)
    ]
    assert reaching == [], "ship the data in the package (importlib.resources) instead"


def test_a_document_of_another_schema_or_a_newer_version_is_refused_and_an_older_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "k.failed.json"
    record = {"point": "k", "stage": "server", "detail": "oom", "log_tail": ["x"]}
    path.write_text(json.dumps({"schema": "kimi-dflash/sweep-failure", **record}))  # as written before versions
    assert Failure.load(path).detail == "oom"
    path.write_text(json.dumps({"schema": "kimi-dflash/sweep-failure", "schema_version": 2, **record}))
    with pytest.raises(UserError, match=r"schema_version 2; this one reads 1 to 1"):
        Failure.load(path)
    path.write_text(json.dumps({"schema": "kimi-dflash/benchmark-result", **record}))
    with pytest.raises(UserError, match=r"not a sweep failure record .*schema 'kimi-dflash/benchmark-result'"):
        Failure.load(path)
    path.write_text(json.dumps({**record, "stage": "somewhere", "log_tail": "x"}))
    with pytest.raises(UserError, match=r"\$\.stage: Input should be 'server' or 'benchmark'; \$\.log_tail: Input"):
        Failure.load(path)


def test_the_running_server_record_is_typed_and_a_foreign_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "running.json"
    path.write_text(json.dumps({"point": "p", "port": 8000, "env": {"A": "1"}}))  # written before it was typed
    assert RunningServer.load(path).port == 8000
    path.write_text(json.dumps({"point": "p", "port": "8000", "env": {"A": 1}}))
    with pytest.raises(UserError, match=r"\$\.port: Input should be a valid integer; \$\.env\.A: Input should be"):
        RunningServer.load(path)


def test_the_fp8_report_prints_from_its_typed_document_and_round_trips(tmp_path: Path) -> None:
    agreement = AgreementSummary(prompts=4, identical=3, mean_prefix_agreement=0.9, median_first_divergence=7.0,
                                 earliest_divergence=5)  # fmt: skip
    bench = {"bf16": BenchSummary(status="ok", command=[], output="b.json", sessions=8, output_tok_s=90.0,
                                  completed=16, failed=0)}  # fmt: skip
    math = MathSummary(accuracy_bf16=0.5, accuracy_fp8=0.25, rows=[])
    report = Fp8Report(servers={"bf16": "u1", "fp8": "u2"}, models=["m", "m"], agreement=agreement, pairs=[],
                       math=math, benchmark=bench, kv_capacity_tokens={"bf16": 1000, "fp8": 2100}, verdict="FAIL",
                       reasons=["FAIL: math"])  # fmt: skip
    lines = report_lines(report, 128)
    assert "token agreement     3/4 greedy outputs identical (128 tokens); mean shared prefix 90%" in lines
    assert "math exact-match    bf16 50.0%  fp8 25.0%  (0 problems)" in lines
    assert "KV capacity         bf16 1,000 tokens  fp8 2,100 tokens  (2.10x)" in lines
    assert lines[-2:] == ["verdict             FAIL", "  FAIL: math"]
    assert "math exact-match" not in "\n".join(report_lines(report, 128, math_run=False))
    report.save(tmp_path / "fp8.json")
    assert Fp8Report.load(tmp_path / "fp8.json") == report
    assert json.loads((tmp_path / "fp8.json").read_text())["schema"] == "kimi-dflash/fp8-validation"

"""core/options.py: a verb's options declared once, as a typed model, turned into its parser."""

from __future__ import annotations

import types
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import pytest

from kimi_dflash.core import options
from kimi_dflash.core.errors import UserError
from kimi_dflash.core.options import option


def _positive_even(text: str) -> int:
    value = int(text)
    if value % 2:
        raise ValueError(f"--even {value} is odd; give an even number")
    return value


@dataclass(kw_only=True)
class Model:
    USAGE_EXIT: ClassVar[int] = 1

    config: str | None = option("the config", positional=True)
    files: list[Path] = option("files to read", positional=True)
    max_tokens: int = option("tokens per reply (default %(default)s)", default=512, minimum=1)
    rate: float = option("a rate", default=1.0, above=0, maximum=100, group="load")
    mode: Literal["fast", "exact"] = option("how", default="fast")
    stream: bool = option("do not stream", default=True)
    force: bool = option("replace what is there")
    header: list[str] = option("a header (repeatable)", repeatable=True, metavar="NAME:VALUE")
    even: int | None = option("an even number", parse=_positive_even)
    only: list[str] = option("restrict to this id", flag="--patch", repeatable=True)
    api_key: str | None = option("a bearer token", secret=True)
    server: str | None = option("a server", exclusive="where")
    model: str | None = option("a model directory", exclusive="where")
    internal: bool = option(hidden=True)
    rest: list[str] = option(rest=True)
    command_line: list[str] = option(argv=True)

    def check(self) -> None:
        if self.force and self.mode == "exact":
            raise ValueError("--force and --mode exact exclude each other")


def _verb(model: type = Model) -> types.ModuleType:
    module = types.ModuleType("verb")
    module.add_cli_args = options.declare(model, "A test verb.")  # type: ignore[attr-defined]
    module.main = lambda args: 7 if args.force else 0  # type: ignore[attr-defined]
    return module


def _parse(*argv: str) -> Model:
    return options.parse(_verb(), list(argv), prog="verb")


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        _parse(*argv)
    return int(exited.value.code or 0), capsys.readouterr().err


def test_fields_become_options_with_their_defaults_and_types() -> None:
    args = _parse("demo-cpu", "a.json", "b.json", "--max-tokens", "64", "--no-stream", "--patch", "x", "--patch", "y")
    assert isinstance(args, Model)
    assert (args.config, args.files, args.max_tokens) == ("demo-cpu", [Path("a.json"), Path("b.json")], 64)
    assert (args.stream, args.force, args.only, args.header, args.mode) == (False, False, ["x", "y"], [], "fast")
    defaults = _parse()
    assert (defaults.config, defaults.files, defaults.stream, defaults.even, defaults.rest) == (
        None,
        [],
        True,
        None,
        [],
    )


def test_help_shows_the_declaration(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse("--help")
    text = capsys.readouterr().out
    assert "tokens per reply (default 512)" in text and "--mode {fast,exact}" in text and "--header NAME:VALUE" in text
    assert "load:" in text and "--no-stream" in text and "--patch PATCH" in text and "--internal" not in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max-tokens", "0"], "--max-tokens must be >= 1, got '0'"),
        (["--max-tokens", "many"], "--max-tokens must be an integer, got 'many'"),
        # an integer that declares no maximum has one: 2**31 - 1 (vllm-router's OverflowError; lists built of it)
        (["--max-tokens", "99999999999999999999"], "--max-tokens must be <= 2147483647, got '99999999999999999999'"),
        (["--rate", "0"], "--rate must be > 0, got '0'"),
        (["--rate", "101"], "--rate must be <= 100, got '101'"),
        (["--rate", "nan"], "--rate must be a finite number, got 'nan'"),
        (["--rate", "inf"], "--rate must be a finite number, got 'inf'"),
        (["--mode", "slow"], "invalid choice: 'slow'"),
        (["--even", "3"], "argument --even: --even 3 is odd; give an even number"),
        (["--force", "--mode", "exact"], "--force and --mode exact exclude each other"),
        (["--server", "a", "--model", "b"], "not allowed with argument"),
    ],
)
def test_bad_values_are_usage_errors_with_the_verbs_exit_status(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, err = _refused(capsys, *argv)
    assert code == Model.USAGE_EXIT and message in err and err.startswith("usage: verb") and "Traceback" not in err


def test_a_secret_is_never_echoed_and_never_abbreviated(capsys: pytest.CaptureFixture[str]) -> None:
    @dataclass(kw_only=True)
    class Strict:
        api_key: str | None = option("a bearer token", secret=True)

    with pytest.raises(SystemExit) as exited:
        options.parse(_verb(Strict), ["--api", "sk-very-secret", "http://user:pw@host/"], prog="verb")
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "unrecognized arguments: --api ***" in err  # --api is not taken for --api-key
    assert "sk-very-secret" not in err and "user:pw" not in err
    with pytest.raises(SystemExit):  # a repeated one: the first value was shown
        options.parse(_verb(Strict), ["--api", "sk-first-secret", "--api", "sk-second", "//u:p w@h"], prog="verb")
    err = capsys.readouterr().err
    assert "unrecognized arguments" in err and "sk-first" not in err and "sk-second" not in err and "p w" not in err
    assert options.parse(_verb(Strict), ["--api-key", "k"], prog="verb").api_key == "k"


def test_abbreviations_are_kept_unless_the_model_refuses_them(capsys: pytest.CaptureFixture[str]) -> None:
    @dataclass(kw_only=True)
    class Loose:
        dry_run: bool = option("print only")

    @dataclass(kw_only=True)
    class Exact(Loose):
        ABBREVIATIONS: ClassVar[bool] = False

    assert options.parse(_verb(Loose), ["--dry"], prog="verb").dry_run
    with pytest.raises(SystemExit):
        options.parse(_verb(Exact), ["--dry"], prog="verb")
    assert "unrecognized arguments: --dry" in capsys.readouterr().err


def test_the_rest_and_the_command_line_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.argv", ["/bin/verb"])
    args = _parse("--max-tokens", "8", "--other=1", "--api-key", "k")
    assert args.rest == ["--other=1"]
    assert args.command_line == ["/bin/verb", "--max-tokens", "8", "--other=1", "--api-key", "k"]


def test_a_model_without_rest_refuses_unknown_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    @dataclass(kw_only=True)
    class Closed:
        force: bool = option("replace")

    with pytest.raises(SystemExit) as exited:
        options.parse(_verb(Closed), ["--other"], prog="verb")
    assert exited.value.code == 2 and "unrecognized arguments: --other" in capsys.readouterr().err


def test_run_parses_then_calls_main() -> None:
    assert options.run(_verb(), ["--force"]) == 7 and options.run(_verb(), []) == 0


def test_a_user_error_from_main_is_one_line_and_its_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    def refuse(args: Model) -> int:
        raise UserError("results.json: not a benchmark result; give the file the benchmark wrote", exit_code=3)

    verb = _verb()
    verb.main = refuse  # type: ignore[attr-defined]
    assert options.run(verb, []) == 3
    err = capsys.readouterr().err
    assert err == "error: results.json: not a benchmark result; give the file the benchmark wrote\n"


def test_a_verb_that_gives_2_another_meaning_exits_its_usage_code_on_a_user_error() -> None:
    def refuse(args: Model) -> int:
        raise UserError("no such config")  # the usual 2; Model.USAGE_EXIT is 1

    verb = _verb()
    verb.main = refuse  # type: ignore[attr-defined]
    assert options.run(verb, []) == Model.USAGE_EXIT == 1


def test_comma_lists_keep_their_order_and_refuse_what_is_not_one() -> None:
    parse = options.comma_list(int, "positive integers", minimum=1)
    assert parse("8,16,8,32") == (8, 16, 32)
    for text in ("", "8,x", "0,8"):
        with pytest.raises(ValueError, match="expected positive integers separated by commas"):
            parse(text)

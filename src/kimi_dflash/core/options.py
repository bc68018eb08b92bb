"""One way to declare a verb's options, and the one place that turns them into a parser.

A verb declares its options once, as the fields of a dataclass (its typed model; the benchmark's is also its
result document): ``option(help, ...)`` keeps the flag (default: from the field's name), default, range,
choices (default: a Literal annotation's), metavar, group, ... in the field's metadata; the type comes from the
annotation. The module then exposes ``add_cli_args = options.declare(Model, DESCRIPTION, EPILOG)`` and
``main(args: Model) -> int``. ``run(module, argv, prog)`` (the front door, ``python -m``, the payload scripts)
builds the parser, parses, and calls ``main`` with the model filled in.

- a ``bool`` field is a switch: ``--x`` when its default is False, ``--no-x`` (or the flag given) when True.
- numbers must be finite (nan/inf are refused while parsing) and within ``minimum``/``above``/``maximum``.
- ``parse``: a function from the text to the value; its ValueError/UserError message is the usage error.
- ``secret``: the value is never echoed in an error, and the parser takes no abbreviations (``--api K`` would
  otherwise be taken for ``--api-key``); error messages also hide URL credentials.
- ``rest``: the arguments this verb does not know, handed on (a sweep passes them to the benchmark).
- ``argv``: the command line as given, ``[program, *arguments]`` (what a result records).
- A model may define ``check()``: its ValueError is a usage error. ``USAGE_EXIT`` (default 2) is the exit status
  of one (qualify's is 1: its 2 means a failed verdict); ``ABBREVIATIONS = False`` refuses ``--dry`` for
  ``--dry-run``; ``GROUPS`` orders the help's groups and gives their descriptions.

Standard library only (core/): the benchmark on a client box builds its parser here too.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import operator
import sys
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from kimi_dflash.core.errors import UserError
from kimi_dflash.core.redaction import SECRET_OPTIONS, redact_url, redact_values, split_secret

KEY = "option"  # the field metadata key
_NONE = type(None)


@dataclasses.dataclass(frozen=True)
class Option:
    help: str = ""
    flag: str | tuple[str, ...] | None = None  # default: --field-name; positional: the name shown
    default: Any = None
    parse: Callable[[str], Any] | None = None
    choices: Sequence[Any] | None = None
    minimum: float | None = None
    above: float | None = None  # a strict lower bound: > 0 for a rate
    maximum: float | None = None
    metavar: str | None = None
    group: str | None = None
    exclusive: str | None = None  # options naming the same group exclude each other
    positional: bool = False
    nargs: str | None = None
    repeatable: bool = False
    required: bool = False
    hidden: bool = False
    secret: bool = False
    rest: bool = False
    argv: bool = False


def option(help: str = "", *, field_default: Any = dataclasses.MISSING, metadata: dict[str, Any] | None = None,
           **settings: Any) -> Any:  # fmt: skip
    """A dataclass field that is a command-line option (``Option``'s settings). The field's default is the
    option's unless ``field_default`` says otherwise (a result document loads older files with None)."""
    if settings.get("repeatable") and settings.get("default") is None:
        settings["default"] = []
    spec = Option(help, **settings)
    meta = {**(metadata or {}), KEY: spec}
    default = spec.default if field_default is dataclasses.MISSING else field_default
    if spec.rest or spec.argv:
        default = []
    if isinstance(default, list | dict):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata=meta)
    if spec.required and field_default is dataclasses.MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def spec_of(field: dataclasses.Field[Any]) -> Option | None:
    return field.metadata.get(KEY)


def comma_list(kind: Callable[[str], Any], what: str, minimum: float | None = None) -> Callable[[str], tuple[Any, ...]]:
    """A ``parse`` for ``8,16,32``: the values in the order given, duplicates dropped; ValueError names ``what``."""

    def parse(text: str) -> tuple[Any, ...]:
        try:
            values = tuple(dict.fromkeys(kind(part) for part in text.split(",") if part.strip()))
        except ValueError:
            values = ()
        if not values or (minimum is not None and min(values) < minimum):
            raise ValueError(f"expected {what} separated by commas, got {text!r}")
        return values

    return parse


def _unwrap(hint: Any) -> Any:
    """``X | None`` -> X."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = [arg for arg in typing.get_args(hint) if arg is not _NONE]
        if len(members) == 1:
            return members[0]
    return hint


def _scalar(hint: Any) -> tuple[Any, tuple[Any, ...] | None]:
    """(the type one value converts to, a Literal's values): ``list[Path]`` -> Path, ``Literal["a"]`` -> str."""
    hint = _unwrap(hint)
    if typing.get_origin(hint) in (list, tuple, set):
        return _scalar(typing.get_args(hint)[0])
    if typing.get_origin(hint) is typing.Literal:
        values = typing.get_args(hint)
        return type(values[0]), values
    return hint, None


def _converter(kind: Any, flag: str, spec: Option) -> Callable[[str], Any]:
    """Text -> value, refusing what is not one, not finite or out of range, with a message naming ``flag``."""

    def convert(text: str) -> Any:
        try:
            value = spec.parse(text) if spec.parse else kind(text)
        except (ValueError, UserError) as error:
            if spec.parse:
                raise argparse.ArgumentTypeError(str(error)) from None
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{flag} must be {what}, got {text!r}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{flag} must be a finite number, got {text!r}")
        for bound, sign, within in ((spec.minimum, ">=", operator.ge), (spec.above, ">", operator.gt),
                                    (spec.maximum, "<=", operator.le)):  # fmt: skip
            if bound is not None and not within(value, bound):
                raise argparse.ArgumentTypeError(f"{flag} must be {sign} {bound:g}, got {text!r}")
        return value

    convert.__name__ = getattr(kind, "__name__", "value")
    return convert


def _argument(name: str, spec: Option, hint: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """add_argument's names and keywords for one field."""
    kind, literal = _scalar(hint)
    dashed = "--" + name.replace("_", "-")
    flags = (spec.flag,) if isinstance(spec.flag, str) else spec.flag or (dashed,)
    kwargs: dict[str, Any] = {"help": argparse.SUPPRESS if spec.hidden else spec.help, "default": spec.default}
    if kind is bool and not spec.parse:
        if spec.default and spec.flag is None:
            flags = ("--no-" + name.replace("_", "-"),)
        action = "store_false" if spec.default else "store_true"
        return flags, {**kwargs, "default": bool(spec.default), "dest": name, "action": action}
    if spec.positional:
        many = typing.get_origin(_unwrap(hint)) in (list, tuple)
        names: tuple[str, ...] = (name,)
        kwargs["metavar"] = spec.metavar or (spec.flag if isinstance(spec.flag, str) else None)
        kwargs["nargs"] = spec.nargs or (("+" if spec.required else "*") if many else (None if spec.required else "?"))
    else:
        names = flags
        shown = spec.metavar or (flags[-1].lstrip("-").replace("-", "_").upper() if spec.flag else None)
        kwargs.update(dest=name, metavar=shown, nargs=spec.nargs, required=spec.required or None)
    if spec.nargs != argparse.REMAINDER and (spec.parse or kind is not str):
        kwargs["type"] = _converter(kind, name if spec.positional else flags[-1], spec)
    kwargs["choices"] = spec.choices or literal
    kwargs["action"] = "append" if spec.repeatable else None
    return names, {key: value for key, value in kwargs.items() if value is not None or key == "default"}


def fields_of(model: type) -> list[tuple[dataclasses.Field[Any], Option]]:
    """The model's option fields, in declaration order."""
    return [(field, field.metadata[KEY]) for field in dataclasses.fields(model) if KEY in field.metadata]


def add(parser: argparse.ArgumentParser, model: type, description: str | None = None,
        epilog: str | None = None) -> None:  # fmt: skip
    """Add ``model``'s options to ``parser`` (built by ``build_parser``), which then parses into a ``model``."""
    if not isinstance(parser, _Parser):
        raise TypeError("options.add needs a parser from options.build_parser")
    parser.description = description or parser.description
    parser.epilog = epilog or parser.epilog
    if "\n" not in (parser.description or "") + (parser.epilog or ""):
        parser.formatter_class = argparse.HelpFormatter  # one long line: let argparse wrap it
    hints = typing.get_type_hints(model)
    declared = fields_of(model)
    groups = {title: parser.add_argument_group(title, text) for title, text in getattr(model, "GROUPS", {}).items()}
    exclusive: dict[str, Any] = {}
    for field, spec in declared:
        if spec.rest or spec.argv:
            continue
        container: Any = parser
        if spec.group:
            container = groups.setdefault(spec.group, parser.add_argument_group(spec.group))
        names, kwargs = _argument(field.name, spec, hints[field.name])
        if spec.exclusive:
            if spec.exclusive not in exclusive:
                required = any(s.required for _, s in declared if s.exclusive == spec.exclusive)
                exclusive[spec.exclusive] = container.add_mutually_exclusive_group(required=required)
            container = exclusive[spec.exclusive]
            kwargs.pop("required", None)
        container.add_argument(*names, **kwargs)
    parser.model = model
    parser.usage_exit = getattr(model, "USAGE_EXIT", 2)
    secrets = [spec.flag or "--" + field.name.replace("_", "-") for field, spec in declared if spec.secret]
    parser.secret_flags = (*SECRET_OPTIONS, *[flag for flag in secrets if isinstance(flag, str)])
    parser.allow_abbrev = getattr(model, "ABBREVIATIONS", True) and not secrets


def declare(model: type, description: str | None = None,
            epilog: str | None = None) -> Callable[[argparse.ArgumentParser], None]:  # fmt: skip
    """A verb module's ``add_cli_args``: ``add_cli_args = options.declare(Model, DESCRIPTION, EPILOG)``."""

    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        add(parser, model, description, epilog)

    return add_cli_args


class _Parser(argparse.ArgumentParser):
    """Parses into the verb's model; a usage error exits with the verb's status and never echoes a secret."""

    model: type | None = None
    usage_exit = 2
    secret_flags: tuple[str, ...] = SECRET_OPTIONS
    _secrets: Sequence[str | None] = ()

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        argv = sys.argv[1:] if args is None else [str(arg) for arg in args]
        self._secrets = [split_secret(argv, self.secret_flags)[1]]
        return super().parse_known_args(argv, namespace)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        argv = sys.argv[1:] if args is None else [str(arg) for arg in args]
        parsed, rest = self.parse_known_args(argv, namespace)
        if self.model is None:
            raise TypeError(f"{self.prog}: no options model was added (options.declare)")
        values: dict[str, Any] = {}
        for field, spec in fields_of(self.model):
            values[field.name] = (
                rest if spec.rest else [sys.argv[0], *argv] if spec.argv else getattr(parsed, field.name)
            )
        if rest and not any(spec.rest for _, spec in fields_of(self.model)):
            self.error(f"unrecognized arguments: {' '.join(rest)}")
        try:
            model = self.model(**values)
            check = getattr(model, "check", None)
            if callable(check):
                check()
        except ValueError as error:
            self.error(str(error))
        return model

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        shown = redact_url(redact_values(message, self._secrets))
        self.exit(self.usage_exit, f"{self.prog}: error: {shown}\n")


def build_parser(module: types.ModuleType, prog: str | None = None,
                 description: str | None = None) -> argparse.ArgumentParser:  # fmt: skip
    """The one place a parser is made: ``module.add_cli_args`` declares what it takes."""
    parser = _Parser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_cli_args(parser)
    return parser


def parse(module: str | types.ModuleType, argv: Sequence[str] | None = None, prog: str | None = None,
          description: str | None = None) -> Any:  # fmt: skip
    """The verb ``module``'s model from ``argv`` (default: this process's); a usage error exits."""
    if isinstance(module, str):
        module = sys.modules[module] if module in sys.modules else importlib.import_module(module)
    return build_parser(module, prog, description).parse_args(argv)


def run(module: str | types.ModuleType, argv: Sequence[str] | None = None, prog: str | None = None,
        description: str | None = None) -> int:  # fmt: skip
    """Parse ``argv`` for the verb ``module`` and run its ``main``: the front door, a module's
    ``if __name__ == "__main__":`` (``sys.exit(options.run(__name__, prog="serve.sh"))``) and the repository's
    scripts all start a verb this way."""
    if isinstance(module, str):
        module = sys.modules[module] if module in sys.modules else importlib.import_module(module)
    return int(module.main(parse(module, argv, prog, description)) or 0)

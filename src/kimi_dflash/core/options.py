"""One way to declare a verb's options, and the one place that turns them into a parser.

A verb's options are the fields of a dataclass (``option(help, ...)`` in each field's metadata; the type from the
annotation, a Literal gives the choices). The module exposes ``add_cli_args = declare(Model, DESCRIPTION, EPILOG)``
and ``main(args: Model) -> int``; ``run`` builds the parser, parses and calls ``main``. ``secret`` options are
never echoed and take no abbreviations. Standard library only (core/): the benchmark on a client box uses it too.

The same vocabulary describes the fields of a document made of dataclasses (the benchmark's result, read and written
by pydantic): ``doc(meaning)`` for a field, ``option(..., record=meaning)`` for an option that is also recorded."""

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
from dataclasses import MISSING
from typing import Any, NoReturn

from kimi_dflash.core import redaction
from kimi_dflash.core.errors import UserError

KEY = "option"  # the field metadata key
MAX_INT = 2**31 - 1  # an integer option's maximum unless it declares one (vllm-router overflows beyond 32 bits)
PORT = {"minimum": 1, "maximum": 65535}  # a TCP port option's range: option(..., **PORT)
DEFAULT_PORT = 8262  # where ./serve.sh serves unless the config says otherwise (the config schema, preflight, bench)
VerbModule = str | types.ModuleType  # a verb's module, or its name (imported when the verb runs)
MAX_TOKENS = 1 << 20  # a token count's: no model serves a reply or a prompt of over 1M tokens (Kimi K2.6: 256K)


@dataclasses.dataclass(frozen=True)
class Option:
    help: str = ""
    flag: str | tuple[str, ...] | None = None  # positional: the name shown
    default: Any = None
    parse: Callable[[str], Any] | None = None
    choices: Sequence[Any] | None = None
    minimum: float | None = None
    above: float | None = None
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


def _is_none(value: Any) -> bool:
    return value is None


def described(text: str | None, omit_if_none: bool = False) -> dict[str, Any]:
    """A field's metadata in pydantic's vocabulary, for document models made of dataclasses: ``text`` is its JSON
    Schema description (None: the field is never written); ``omit_if_none`` leaves a None out of the JSON."""
    if text is None:
        return {"exclude": True}
    return {"description": text, "exclude_if": _is_none} if omit_if_none else {"description": text}


def doc(text: str, *, default: Any = MISSING, factory: Any = MISSING, omit_if_none: bool = False) -> Any:
    """A described document field that is no option: ``count: int | None = doc("number of values", default=None)``
    (an ``omit_if_none`` field defaults to None)."""
    if omit_if_none and default is MISSING and factory is MISSING:
        default = None
    return dataclasses.field(default=default, default_factory=factory, metadata=described(text, omit_if_none))


def option(
    help: str = "",
    *,
    record: str | None = None,
    omit_if_none: bool = False,
    field_default: Any = MISSING,
    **settings: Any,
) -> Any:
    """A dataclass field that is a command-line option. In a document model (the benchmark's settings) ``record``
    says what the recorded field means (its description, and the help unless ``help`` is given); a field without it
    is not written. The field's default is the option's, or for a recorded field None (what a file written before
    the field existed reads as), unless ``field_default`` says otherwise."""
    if (settings.get("repeatable") or settings.get("rest") or settings.get("argv")) and not settings.get("default"):
        settings["default"] = []
    if record is not None and not help:
        shown = settings.get("default") is not None and not isinstance(settings.get("default"), bool)
        help = record + (" (default %(default)s)" if shown else "")
    spec = Option(help, **settings)
    meta = {**described(record, omit_if_none), KEY: spec}
    if spec.required and field_default is MISSING:
        return dataclasses.field(metadata=meta)
    if field_default is MISSING:
        field_default = spec.default if record is None else None
    if isinstance(field_default, list | dict):
        return dataclasses.field(default_factory=lambda: type(field_default)(field_default), metadata=meta)
    return dataclasses.field(default=field_default, metadata=meta)


def comma_list(
    kind: Callable[[str], Any], what: str, minimum: float | None = None, maximum: float | None = None
) -> Callable[[str], tuple[Any, ...]]:
    """A ``parse`` for ``8,16,32``: the values in the order given, duplicates dropped; ValueError names ``what``."""

    def parse(text: str) -> tuple[Any, ...]:
        try:
            values = tuple(dict.fromkeys(kind(part) for part in text.split(",") if part.strip()))
        except ValueError:
            values = ()
        low, high = -math.inf if minimum is None else minimum, math.inf if maximum is None else maximum
        if not values or ((low, high) != (-math.inf, math.inf) and not all(low <= v <= high for v in values)):
            raise ValueError(f"expected {what} separated by commas, got {text!r}")
        return values

    return parse


def http_url(text: str) -> str:
    """A ``parse`` for a server's URL: http(s)://, and no credentials (a key goes as a bearer header)."""
    shown = redaction.redact_query(redaction.redact_url(text))
    if redaction.has_credentials(text):
        raise ValueError(f"{shown!r} carries credentials (user:password@): give the key in $OPENAI_API_KEY")
    if not text.strip().startswith(("http://", "https://")):
        raise ValueError(f"{shown!r} is not a URL: it must start with http:// or https://")
    return text


def fields_of(model: type) -> list[tuple[dataclasses.Field[Any], Option]]:
    """The model's option fields, in declaration order."""
    return [(field, field.metadata[KEY]) for field in dataclasses.fields(model) if KEY in field.metadata]


def flag_of(field: dataclasses.Field[Any], spec: Option) -> str:
    return spec.flag if isinstance(spec.flag, str) else (spec.flag or ("--" + field.name.replace("_", "-"),))[0]


def _scalar(hint: Any) -> tuple[Any, tuple[Any, ...] | None, bool]:
    """(the type one value converts to, a Literal's values, whether the field holds several): ``list[Path] |
    None`` -> (Path, None, True), ``Literal["a"]`` -> (str, ("a",), False)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and len(members := [a for a in args if a is not type(None)]) == 1:
        return _scalar(members[0])
    if origin in (list, tuple, set):
        return _scalar(args[0])[:2] + (True,)
    if origin is typing.Literal:
        return type(args[0]), args, False
    return hint, None, False


def _converter(kind: Any, flag: str, spec: Option) -> Callable[[str], Any]:
    """Text -> value, refusing what is not one, not finite or out of range, with a message naming ``flag``."""

    def convert(text: str) -> Any:
        try:
            value = spec.parse(text) if spec.parse else kind(text)
        except (ValueError, UserError) as error:
            what = "an integer" if kind is int else "a number"
            message = str(error) if spec.parse else f"{flag} must be {what}, got {text!r}"
            raise argparse.ArgumentTypeError(message) from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{flag} must be a finite number, got {text!r}")
        maximum = MAX_INT if spec.maximum is None and type(value) is int else spec.maximum
        bounds = ((spec.minimum, ">=", operator.ge), (spec.above, ">", operator.gt), (maximum, "<=", operator.le))
        for bound, sign, within in bounds:
            if bound is not None and not within(value, bound):
                raise argparse.ArgumentTypeError(f"{flag} must be {sign} {bound:.15g}, got {text!r}")
        return value

    convert.__name__ = getattr(kind, "__name__", "value")
    return convert


def _argument(name: str, spec: Option, hint: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    kind, literal, many = _scalar(hint)
    flags = (spec.flag,) if isinstance(spec.flag, str) else spec.flag or ("--" + name.replace("_", "-"),)
    kwargs: dict[str, Any] = {"help": argparse.SUPPRESS if spec.hidden else spec.help, "default": spec.default}
    if kind is bool and not spec.parse:
        flags = ("--no-" + name.replace("_", "-"),) if spec.default and spec.flag is None else flags
        action = "store_false" if spec.default else "store_true"
        return flags, {**kwargs, "default": bool(spec.default), "dest": name, "action": action}
    if spec.positional:
        names: tuple[str, ...] = (name,)
        kwargs["metavar"] = spec.metavar or (spec.flag if isinstance(spec.flag, str) else None)
        kwargs["nargs"] = spec.nargs or (("+" if spec.required else "*") if many else (None if spec.required else "?"))
    else:
        names = flags
        shown = spec.metavar or (flags[-1].lstrip("-").replace("-", "_").upper() if spec.flag else None)
        kwargs.update(dest=name, metavar=shown, nargs=spec.nargs, required=spec.required or None)
    if spec.nargs != argparse.REMAINDER and (spec.parse or kind is not str):
        kwargs["type"] = _converter(kind, name if spec.positional else flags[-1], spec)
    kwargs.update(choices=spec.choices or literal, action="append" if spec.repeatable else None)
    return names, {key: value for key, value in kwargs.items() if value is not None or key == "default"}


def declare(
    model: type, description: str | None = None, epilog: str | None = None
) -> Callable[[argparse.ArgumentParser], None]:
    """A verb module's ``add_cli_args``: ``add_cli_args = options.declare(Model, DESCRIPTION, EPILOG)``."""

    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        if not isinstance(parser, _Parser):
            raise TypeError("a verb's options go on a parser from core.options.build_parser")
        parser.description, parser.epilog = description or parser.description, epilog or parser.epilog
        if "\n" not in (parser.description or "") + (parser.epilog or ""):
            parser.formatter_class = argparse.HelpFormatter  # one long line: let argparse wrap it
        hints, declared = typing.get_type_hints(model), fields_of(model)
        groups, exclusive, descriptions = {}, {}, getattr(model, "GROUPS", {})  # GROUPS: a group's description
        for field, spec in declared:
            if spec.rest or spec.argv:
                continue
            if spec.group and spec.group not in groups:
                groups[spec.group] = parser.add_argument_group(spec.group, descriptions.get(spec.group))
            container = groups[spec.group] if spec.group else parser
            names, kwargs = _argument(field.name, spec, hints[field.name])
            if spec.exclusive:
                if spec.exclusive not in exclusive:
                    required = any(s.required for _, s in declared if s.exclusive == spec.exclusive)
                    exclusive[spec.exclusive] = container.add_mutually_exclusive_group(required=required)
                container = exclusive[spec.exclusive]
                kwargs.pop("required", None)
            container.add_argument(*names, **kwargs)
        secrets = [flag_of(field, spec) for field, spec in declared if spec.secret]
        parser.model, parser.usage_exit = model, getattr(model, "USAGE_EXIT", 2)
        parser.secret_flags = (*redaction.SECRET_OPTIONS, *secrets)
        parser.allow_abbrev = getattr(model, "ABBREVIATIONS", True) and not secrets

    return add_cli_args


class _Parser(argparse.ArgumentParser):
    """Parses into the verb's model; a usage error exits with the verb's status and never echoes a secret."""

    model: type | None = None
    usage_exit = 2
    secret_flags: tuple[str, ...] = redaction.SECRET_OPTIONS
    _secrets: Sequence[str | None] = ()

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        argv = sys.argv[1:] if args is None else [str(arg) for arg in args]
        self._secrets = redaction.argv_secrets(argv, self.secret_flags)
        return super().parse_known_args(argv, namespace)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        argv = sys.argv[1:] if args is None else [str(arg) for arg in args]
        parsed, rest = self.parse_known_args(argv, namespace)
        if self.model is None:
            raise TypeError(f"{self.prog}: no options were declared (core.options.declare)")
        declared = fields_of(self.model)
        if rest and not any(spec.rest for _, spec in declared):
            self.error(f"unrecognized arguments: {' '.join(rest)}")
        values = {
            field.name: rest if spec.rest else [sys.argv[0], *argv] if spec.argv else getattr(parsed, field.name)
            for field, spec in declared
        }
        try:
            model = self.model(**values)
            if callable(check := getattr(model, "check", None)):
                check()
        except ValueError as error:
            self.error(str(error))
        return model

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        shown = redaction.redact_urls(redaction.redact_values(message, self._secrets))
        self.exit(self.usage_exit, f"{self.prog}: error: {shown}\n")


def _module(module: VerbModule) -> types.ModuleType:
    if isinstance(module, types.ModuleType):
        return module
    return sys.modules[module] if module in sys.modules else importlib.import_module(module)


def build_parser(
    module: VerbModule, prog: str | None = None, description: str | None = None
) -> argparse.ArgumentParser:
    """The one place a parser is made; the verb ``module``'s ``add_cli_args`` declares what it takes."""
    parser = _Parser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    _module(module).add_cli_args(parser)
    return parser


def parse(
    module: VerbModule, argv: Sequence[str] | None = None, prog: str | None = None, description: str | None = None
) -> Any:
    """The verb's model from ``argv`` (default: this process's); a usage error exits."""
    return build_parser(module, prog, description).parse_args(argv)


def run(
    module: VerbModule, argv: Sequence[str] | None = None, prog: str | None = None, description: str | None = None
) -> int:
    """Parse ``argv`` for the verb ``module`` and run its ``main``: how every entry point starts a verb. A
    ``UserError`` that reaches here is printed as ``error: ...`` (no traceback) and exits with its code; the usual 2
    becomes the model's ``USAGE_EXIT`` where the verb gives 2 another meaning (as bad arguments do)."""
    args = parse(module, argv, prog, description)
    try:
        return int(_module(module).main(args) or 0)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return getattr(type(args), "USAGE_EXIT", 2) if error.exit_code == 2 else error.exit_code

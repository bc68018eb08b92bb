"""The one number formatter (core/formatting.py), and no module keeping a private one."""

from __future__ import annotations

import re

from kimi_dflash.core import formatting as f
from repo_paths import REPO_ROOT


def test_each_kind_of_figure_has_one_look() -> None:
    assert (f.number(12.345), f.number(12.345, 2), f.number(1230368, 0, grouped=True)) == ("12.3", "12.35", "1,230,368")
    assert (f.percent(0.7123), f.percent(0.5, 0), f.percent(-0.096, signed=True)) == ("71.2 %", "50 %", "-9.6 %")
    assert (f.ratio(1.104), f.interval(1.414, 1.5812), f.general(2.0), f.general(0.75)) == (
        "1.10x",
        "[1.41, 1.58]",
        "2",
        "0.75",
    )
    assert (f.seconds(4.24), f.seconds(42.4), f.duration(185), f.duration(3720)) == ("4.2 s", "42 s", "3m05s", "1h02m")
    assert f.Fmt(1, "percent")(0.25) == "25.0 %" and f.Fmt(2, "ratio")(3) == "3.00x" and f.Fmt(0)(8) == "8"


def test_missing_reads_a_dash_in_tables_and_nothing_in_csv() -> None:
    shown = {f.number(None), f.percent(None), f.ratio(None), f.general(None), f.interval(None, 2.0), f.seconds(None)}
    assert shown == {f.MISSING} == {"—"}
    assert (f.raw(None), f.raw(float("nan")), f.raw(1.50), f.raw(2), f.raw(0.1234567)) == (
        "",
        "",
        "1.5",
        "2",
        "0.123457",
    )


def test_tables_are_rendered_one_way() -> None:
    assert f.markdown_table(["a", "b"], "lr", [[1, "x|y"]]) == ["| a | b |", "|---|---:|", "| 1 | x\\|y |"]
    assert f.text_row(["ab", "c"], [4, 3], "> ") == ">   ab    c"


# A private number formatter: a helper named like one, or the missing-value idiom every one of them carried.
PRIVATE = re.compile(r"def _?(f|fmt|num|pct|ms|cell|stat|ratio|seconds|format_duration)\((value|x|seconds)\b"
                     r"|return \"[-—]\" if \w+ is None else f\"")  # fmt: skip


def test_no_module_keeps_a_private_number_formatter() -> None:
    found = [
        f"{path.relative_to(REPO_ROOT)}: {match.group(0)}"
        for tree in ("src", "lab")
        for path in sorted((REPO_ROOT / tree).rglob("*.py"))
        if path.name != "formatting.py"
        for match in PRIVATE.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not found, "format figures with kimi_dflash.core.formatting:\n" + "\n".join(found)

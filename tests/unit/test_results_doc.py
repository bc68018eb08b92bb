"""README's Results section is what benchmarks/render_results.py prints from benchmarks/results/."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kimi_dflash.bench.result import load_result
from kimi_dflash.core.errors import UserError
from kimi_dflash.results_doc import BEGIN, END, RECIPE_FILE, REPORTED_SCHEMA, recipe_figures, render_block
from repo_paths import REPO_ROOT

ROOT = REPO_ROOT
RESULTS = ROOT / "benchmarks" / "results"


def test_readme_results_equal_what_the_generator_prints() -> None:
    printed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "render_results.py")], capture_output=True,
                             text=True, check=True, timeout=60).stdout  # fmt: skip
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block == "\n" + printed, "README is stale: run kimi-dflash results --write README.md"
    assert printed == render_block(RESULTS)


def test_measured_results_carry_their_full_settings() -> None:
    measured = [p for p in RESULTS.glob("*.json") if json.loads(p.read_text("utf-8"))["schema"] != REPORTED_SCHEMA]
    assert measured, "benchmarks/results/ holds no measured result"
    for path in measured:
        result = load_result(path)
        assert result.run.status == "complete"
        assert result.server_config is not None and result.server_config.values["DEVICE"] == "cpu", path
        assert result.settings.max_tokens and result.settings.sessions


def test_reported_figures_are_labelled_as_not_ours() -> None:
    recipe = recipe_figures()
    assert recipe.measured_by_this_project is False and recipe.provenance
    assert "not measured by this project" in render_block(RESULTS)


def test_the_recipe_figures_ship_in_the_package_once_and_render_for_any_directory(tmp_path) -> None:
    """The package carries the recipe's figures (qualify's report reads them on any install; no checkout reach);
    benchmarks/results/ keeps only what this project measured, so there is one copy."""
    assert not (RESULTS / RECIPE_FILE).exists()
    assert (ROOT / "src" / "kimi_dflash" / "data" / RECIPE_FILE).is_file()
    assert recipe_figures().rows[0].output_tok_s == 507.6
    assert "**Kimi K2.6 + DFlash on 8x AMD MI300X: reported by" in render_block(tmp_path)  # an empty directory


def test_a_reported_figures_file_of_another_shape_is_refused_with_its_path(tmp_path) -> None:
    bad = {"schema": REPORTED_SCHEMA, "schema_version": 1, "title": "x", "rows": "none"}
    (tmp_path / "other.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(UserError, match=r"other.json: not a reported figures .*\$.source: Field required"):
        render_block(tmp_path)


def _write(readme, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    """results --write README, from an empty results directory beside the test's README."""
    from kimi_dflash import results_cli
    from kimi_dflash.core import options

    (readme.parent / "results").mkdir(exist_ok=True)
    code = options.run(results_cli, [str(readme.parent / "results"), "--write", str(readme)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "found"),
    [
        (f"intro\n{END}\nkept\n{BEGIN}\nold\ntail\n", "end before begin"),
        (f"{BEGIN}\nold\n{END}\nmiddle\n{BEGIN}\nold\n{END}\n", "2 begin and 2 end"),
        (f"{BEGIN}\nold\n{END}\n{END}\n", "1 begin and 2 end"),
        ("no markers\n", "0 begin and 0 end"),
    ],
)
def test_results_write_needs_one_begin_then_one_end_and_otherwise_writes_nothing(
    tmp_path, capsys: pytest.CaptureFixture[str], text: str, found: str
) -> None:
    """Issue 31 D5: markers out of order deleted the rest of the file, said "updated", exit 0."""
    readme = tmp_path / "README.md"
    readme.write_text(text, encoding="utf-8")
    code, err = _write(readme, capsys)
    assert code == 2 and f"(found {found}); nothing written" in err and "updated" not in err
    assert err.count("\n") == 1 and readme.read_text(encoding="utf-8") == text


def test_results_write_refuses_what_it_cannot_read_or_write_in_one_line(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 31 D6 and the note: a non-UTF-8 file, a symlinked README (refused: the project never writes through a
    link, and the link would become a regular file), a disk that refuses the write (EROFS: root is refused too)."""
    import errno

    from kimi_dflash.core import doc_sections

    readme = tmp_path / "README.md"
    readme.write_bytes(f"{BEGIN}\n\xff\n{END}\n".encode("latin-1"))
    code, err = _write(readme, capsys)
    assert code == 2 and "is not UTF-8 text" in err and "Traceback" not in err

    real = tmp_path / "docs" / "README.md"
    real.parent.mkdir()
    real.write_text(f"{BEGIN}\nold\n{END}\n", encoding="utf-8")
    readme.unlink()
    readme.symlink_to(real)
    code, err = _write(readme, capsys)
    assert code == 2 and "is a symbolic link, which is refused here; name the file itself" in err
    assert readme.is_symlink() and real.read_text(encoding="utf-8") == f"{BEGIN}\nold\n{END}\n"

    def read_only(path, text, **kwargs):  # type: ignore[no-untyped-def]
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(doc_sections, "write_text_atomic", read_only)
    code, err = _write(real, capsys)
    assert code == 2 and f"results: cannot write {real}: Read-only file system; nothing was changed" in err
    assert err.count("\n") == 1 and "Traceback" not in err

"""The generated docs match their generators (config reference, result-file reference and JSON Schema), and
`python -m kimi_dflash_lab docs` regenerates them in a checkout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench_helpers import EXAMPLE_RESULT
from kimi_dflash.config.schema import KEYS
from kimi_dflash_lab.docgen import cli, config_reference, result_schema
from repo_paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"
STALE = "docs are out of date: run python -m kimi_dflash_lab docs"


def section(text: str, begin: str, end: str) -> str:
    return text.split(begin, 1)[1].split(end, 1)[0].strip()


def test_config_reference_is_generated_from_the_schema() -> None:
    page = (REPO_ROOT / config_reference.PAGE).read_text()
    reference = section(page, config_reference.BEGIN, config_reference.END)
    assert reference == config_reference.render_reference().strip(), STALE
    for key in KEYS:
        assert f"`{key.name}`" in reference


def test_docs_reference_and_json_schema_are_generated_from_the_model() -> None:
    page = (DOCS / result_schema.DOC_PAGE).read_text()
    assert section(page, result_schema.BEGIN, result_schema.END) == result_schema.render_reference().strip(), STALE
    assert (DOCS / result_schema.SCHEMA_FILE).read_text() == result_schema.render_json_schema(), STALE


def test_shipped_example_is_valid_under_the_json_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    example = json.loads(EXAMPLE_RESULT.read_text())
    schema = json.loads(result_schema.render_json_schema())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(example, schema, cls=jsonschema.Draft202012Validator)
    del example["results"][0]["ttft_ms"]["p95"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(example, schema, cls=jsonschema.Draft202012Validator)


def checkout_copy(tmp_path: Path) -> Path:
    """A checkout whose docs and README may be rewritten: its src/ is this checkout's (the package imported)."""
    root = tmp_path / "checkout"
    root.mkdir()
    (root / "src").symlink_to(REPO_ROOT / "src")
    shutil.copytree(REPO_ROOT / "benchmarks" / "results", root / "benchmarks" / "results")
    shutil.copytree(DOCS, root / "docs")
    shutil.copy(REPO_ROOT / "README.md", root / "README.md")
    return root


def test_docs_command_regenerates_every_stale_section(tmp_path: Path) -> None:
    root = checkout_copy(tmp_path)
    sections = {
        root / config_reference.PAGE: config_reference.BEGIN,
        root / "docs" / "benchmark.md": result_schema.BEGIN,
    }
    fresh = [page.read_text() for page in sections]
    for page, begin in sections.items():
        page.write_text(page.read_text().replace(begin, f"{begin}\nstale line"))
    (root / "docs" / result_schema.SCHEMA_FILE).write_text("{}\n")
    assert cli.main(cli.DocsOptions(root=root)) == 0
    assert [page.read_text() for page in sections] == fresh
    assert (root / "docs" / result_schema.SCHEMA_FILE).read_text() == result_schema.render_json_schema()


def test_docs_command_names_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(cli.DocsOptions(root=tmp_path)) == 2
    assert "is not a kimi-k26-dflash checkout; pass --root" in capsys.readouterr().err
    root = checkout_copy(tmp_path)
    page = root / config_reference.PAGE
    page.write_text(page.read_text().replace(config_reference.END, ""))
    assert cli.main(cli.DocsOptions(root=root)) == 1
    assert f"docs: config reference: {page}: markers" in capsys.readouterr().err

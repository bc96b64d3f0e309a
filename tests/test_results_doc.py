"""docs/results.md's generated tables are what scripts/results_tables.py draws from docs/results/*.json, and its
--check fails when a JSON no longer matches the table it was drawn into."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("results_tables", ROOT / "scripts" / "results_tables.py")
results_tables = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(results_tables)

DOC = ROOT / "docs" / "results.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
RESULTS = ROOT / "docs" / "results"


def _marked() -> list[str]:
    return [m["name"] for page in PAGES for m in results_tables.BLOCK.finditer(page.read_text(encoding="utf-8"))]


def test_every_marked_table_has_its_json_and_every_json_a_table():
    names = _marked()
    assert names, "docs/results.md marks no generated table"
    assert len(names) == len(set(names)), "a table is marked twice"
    assert sorted(names) == sorted(p.stem for p in RESULTS.glob("*.json"))


def test_the_docs_tables_are_what_the_script_prints():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        rebuilt, changed = results_tables.rebuild(text)
        assert changed == [], f"run python scripts/results_tables.py: {changed} in {page.name} differ from their JSON"
        assert rebuilt == text
        for m in results_tables.BLOCK.finditer(text):
            assert m["body"] == results_tables.render(RESULTS / f"{m['name']}.json") + "\n"
    assert results_tables.main(["--check"]) == 0


def test_a_changed_json_fails_the_check_and_a_rebuild_fixes_it(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    name = next(n for n in _marked() if json.loads((RESULTS / f"{n}.json").read_text())["experiment"] == "whatif")
    page = next(p for p in PAGES if f"<!-- table: {name} -->" in p.read_text(encoding="utf-8"))
    doc = tmp_path / page.name
    shutil.copy(page, doc)
    path = results / f"{name}.json"
    data = json.loads(path.read_text())
    data["rows"][0]["speedup"] += 0.5  # a figure the table prints (to two decimals)
    path.write_text(json.dumps(data))
    assert results_tables.main(["--check", "--doc", str(doc), "--results", str(results)]) == 1
    assert results_tables.main(["--doc", str(doc), "--results", str(results)]) == 0
    assert results_tables.main(["--check", "--doc", str(doc), "--results", str(results)]) == 0
    assert doc.read_text() != page.read_text()
    outside = results_tables.BLOCK.sub("", doc.read_text())
    assert outside == results_tables.BLOCK.sub("", page.read_text()), "text outside the markers was changed"


def test_an_edited_table_fails_the_check(tmp_path):
    doc = tmp_path / "results.md"
    text = DOC.read_text(encoding="utf-8")
    m = next(results_tables.BLOCK.finditer(text))
    doc.write_text(text[: m.start("body")] + m["body"].replace("|", "| ", 1) + text[m.end("body"):])
    assert results_tables.main(["--check", "--doc", str(doc)]) == 1


def test_a_marked_table_without_its_json_is_named(tmp_path):
    doc = tmp_path / "results.md"
    doc.write_text("<!-- table: nowhere -->\n| a |\n<!-- /table -->\n")
    with pytest.raises(SystemExit, match="nowhere"):
        results_tables.main(["--check", "--doc", str(doc), "--results", str(tmp_path)])


def test_every_table_in_the_results_doc_is_drawn_from_a_json():
    """A Markdown table outside the markers would be a figure copied by hand: none may be left."""
    outside = results_tables.BLOCK.sub("", DOC.read_text(encoding="utf-8"))
    hand = [line for line in outside.splitlines() if line.startswith("|---")]
    assert hand == [], f"docs/results.md has {len(hand)} table(s) outside <!-- table: NAME --> markers"

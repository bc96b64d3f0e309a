"""Rebuild the generated tables of docs/*.md (docs/results.md's, and those of a reference page) from the result
JSONs committed under docs/results/.

    python scripts/results_tables.py            # rewrite every generated table in docs/*.md
    python scripts/results_tables.py --check    # exit 1, naming each table that differs from its JSON
    python scripts/results_tables.py --print NAME   # one table's text, as it would be written

A generated table sits between two marker comments in the Markdown:

    <!-- table: NAME -->
    ...the text printed for docs/results/NAME.json...
    <!-- /table -->

Everything between the markers is replaced; everything outside them (the machine, the date, the command, what
the figures say) is prose and is left alone. The text is what `python -m playground report --brief FILE` prints
for that file: its experiment's table as playground.experiments declares it (a lab result's, a replay's, a vLLM
sweep's, a `whatif`'s, a measurement script's; a speed or sweep grid in a page), so a figure in the docs is re-read
from the file that measured it, never copied by hand.
A result JSON is small: an experiment's `--out` file, or that file slimmed by

    python scripts/results_tables.py --slim RUN.json docs/results/NAME.json

which cuts each run to its place and ratio, drops each calibration's raw samples and rounds floats to 10
significant digits (the cells' summaries stay), and refuses when the table drawn from the slim file would differ
from the one drawn from the full file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from playground.errors import PlaygroundError
from playground.experiments import experiment_named
from playground.lab.report import report
from playground.results import read_document

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
"""Every page here may hold marked tables: results.md the current figures, a reference page (drafters.md,
measuring.md, gpu.md) the measurement its text stands on."""
RESULTS = ROOT / "docs" / "results"
BLOCK = re.compile(r"(<!-- table: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.DOTALL)


def save(doc: dict, out: str | Path, markdown) -> int:
    """What a script's --out does: write its small result `doc` as JSON and print the table `markdown` draws from
    it (the one results_tables draws in the docs); the exit status."""
    Path(out).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(markdown(doc))
    return 0


def render(path: Path) -> str:
    """A result file as the Markdown `python -m playground report --brief FILE` prints (each experiment's table, as
    playground.experiments declares it; a measurement script's too)."""
    experiment = experiment_named(read_document(path).get("experiment"))
    try:
        return report(path, brief=True).rstrip("\n")  # a vLLM sweep's report ends in a blank line; a table does not
    except PlaygroundError as e:  # a file written by another version of the script says what its table lacks
        if experiment is None or not experiment.script:
            raise
        raise SystemExit(f"results_tables: {e}") from e


RUN_KEYS = ("round", "prompt", "k", "ratio", "e2e_ratio")


def _rounded(x):
    """Floats to 10 significant digits. A table prints a ratio of two of them (c = draft step / target step) to 3
    decimals: at 6 digits the ratio moved by up to 2e-6 and crossed a printed digit's boundary in a few runs in a
    hundred, which the check below then refused; at 10 it moves by 2e-10."""
    if isinstance(x, float):
        return float(f"{x:.10g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    return [_rounded(v) for v in x] if isinstance(x, list) else x


def slim(full: Path, out: Path) -> None:
    """Write `full` to `out` with each run cut to RUN_KEYS and without the calibrations' raw samples (most of a
    lab result's bytes: a grid of 400 runs is 1.5 MB), after checking that the table drawn from it is unchanged."""
    doc = read_document(full)
    # a run keeps what places it and its ratio (the noise bound reads their scatter); the grid's cells (table,
    # by_prompt) and the schedules summarize the rest
    if doc["experiment"] in ("speed", "sweep"):
        doc["runs"] = [{key: run[key] for key in RUN_KEYS if key in run} for run in doc.get("runs", [])]
        doc.pop("plain_runs", None)
    for timing in [doc.get("timing"), *(doc.get("timing_by_prompt") or {}).values()]:
        if isinstance(timing, dict):
            timing.pop("raw", None)  # the calibration's every timed pass; its medians and spread stay
    out.write_text(json.dumps(_rounded(doc), indent=0))
    try:
        same = render(out) == render(full)
    except PlaygroundError as e:
        same = f"({e})"
    if same is not True:
        out.unlink()
        raise SystemExit(f"results_tables: {full}'s table needs what --slim drops; commit it whole {same or ''}")


def rebuild(text: str, results: Path = RESULTS) -> tuple[str, list[str]]:
    """`text` with every marked table redrawn from results/NAME.json, and the names of the tables that changed."""
    changed: list[str] = []

    def redraw(m: re.Match) -> str:
        path = results / f"{m['name']}.json"
        if not path.is_file():
            raise SystemExit(f"results_tables: docs/results.md marks a table {m['name']!r}, but there is no {path}")
        body = render(path).rstrip("\n") + "\n"
        if body != m["body"]:
            changed.append(m["name"])
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(redraw, text), changed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a table differs from its JSON")
    ap.add_argument("--print", metavar="NAME", help="print the table drawn from docs/results/NAME.json")
    ap.add_argument("--slim", nargs=2, type=Path, metavar=("RUN", "OUT"),
                    help="write the result RUN to OUT with its runs cut to their ratios (the table unchanged)")
    ap.add_argument("--doc", type=Path, action="append", help=argparse.SUPPRESS)
    ap.add_argument("--results", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.print:
        print(render(args.results / f"{args.print}.json"))
        return 0
    if args.slim:
        slim(*args.slim)
        return 0
    tables, redrawn = 0, []
    for doc in args.doc or sorted(DOCS.glob("*.md")):
        text = doc.read_text(encoding="utf-8")
        new, changed = rebuild(text, args.results)
        tables += len(BLOCK.findall(text))
        redrawn += [f"{doc.name}: {name}" for name in changed]
        if new != text and not args.check:
            doc.write_text(new, encoding="utf-8")
    if args.check:
        for name in redrawn:
            print(f"{name} differs from its JSON (run python scripts/results_tables.py)", file=sys.stderr)
        return 1 if redrawn else 0
    print(f"{tables} tables, {len(redrawn)} redrawn: {', '.join(redrawn) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""An experiment is declared once (playground.experiments): every result kind has a table and the command or script
that writes it, and a toy experiment declared here appears in the CLI's parser and dispatch, in `report` and in
scripts/results_tables.py with no other edit."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import playground.results
from playground.cli import build_parser, main
from playground.errors import PlaygroundError
from playground.experiments import (
    Experiment,
    experiment_named,
    experiments,
    register_experiment,
    result_type,
    unregister_experiment,
)
from playground.lab.report import experiment_text, report
from playground.results import Result, from_document

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("results_tables_for_experiments", ROOT / "scripts" / "results_tables.py")
results_tables = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = results_tables
SPEC.loader.exec_module(results_tables)


def _subcommands() -> set[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def _result_types() -> list[type]:
    """Every typed result the package declares (a Result subclass with an experiment name)."""
    for info in pkgutil.iter_modules(playground.results.__path__):
        importlib.import_module(f"playground.results.{info.name}")
    found, todo = [], list(Result.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.experiment and cls.__module__.startswith("playground."):
            found.append(cls)
    return found


@pytest.mark.parametrize("experiment", experiments(), ids=lambda e: e.name)
def test_every_experiment_has_a_table_and_a_command_or_a_script(experiment):
    tables = [experiment.load(f) for f in ("table", "report", "brief") if getattr(experiment, f) is not None]
    assert tables and all(callable(t) for t in tables)
    if experiment.result is not None:
        assert result_type(experiment.name).experiment == experiment.name
    commands = _subcommands()
    if experiment.run is not None:
        assert set(experiment.commands) <= commands and callable(experiment.load("run"))
        assert callable(experiment.load("add_arguments"))
    elif experiment.command:
        assert experiment.command in commands
    else:
        assert (ROOT / "scripts" / experiment.script).is_file()
        assert f"playground.studies.{Path(experiment.script).stem}:" in experiment.report  # the table in the package


def test_every_result_type_and_committed_result_is_declared():
    declared = {e.name for e in experiments()}
    assert {cls.experiment for cls in _result_types()} <= declared
    committed = {json.loads(p.read_text())["experiment"] for p in (ROOT / "docs" / "results").glob("*.json")}
    assert committed <= declared


def test_a_declaration_without_a_table_or_a_command_is_refused():
    with pytest.raises(PlaygroundError, match="declares no table"):
        Experiment("toy-no-table", result=_ToyResult, script="none.py")
    with pytest.raises(PlaygroundError, match="neither its command"):
        Experiment("toy-no-command", result=_ToyResult, table=_toy_table)
    with pytest.raises(PlaygroundError, match="a lab command declares run, add_arguments and help"):
        Experiment("toy-half-command", result=_ToyResult, table=_toy_table, run=_toy_run, help="toy")
    with pytest.raises(PlaygroundError, match="already registered"):
        register_experiment(Experiment("bench-peers", report=repr, script="none.py"))  # another's command name


def test_the_old_command_name_runs_the_renamed_command():
    """`peers` writes `peers` results; `bench-peers`, the name docs/results.md records, still parses."""
    assert experiment_named("bench-peers") is experiment_named("peers")
    args = build_parser().parse_args(["bench-peers", "--k", "2"])
    assert args.command in experiment_named("peers").commands and args.k == 2


# --- a toy experiment, declared once here ---------------------------------------------------------------------


@dataclass
class _ToyResult(Result):
    experiment = "toy-experiment"
    figure: float
    environment: None = None


def _toy_table(result: _ToyResult, setup: str) -> str:
    return f"toy ({setup}): figure {result.figure:.2f}"


def _toy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--figure", type=float, default=1.5)


RAN: list[argparse.Namespace] = []


def _toy_run(args: argparse.Namespace) -> int:
    RAN.append(args)
    result = _ToyResult(figure=args.figure)
    print(experiment_text(result, "the toy's machine"))
    if args.out:
        result.save(args.out)
    return 0


TOY = Experiment("toy-experiment", result=_ToyResult, table=_toy_table, help="a toy experiment",
                 run=_toy_run, add_arguments=_toy_args)


@pytest.fixture
def toy():
    register_experiment(TOY)
    yield TOY
    unregister_experiment(TOY.name)
    RAN.clear()


def test_a_toy_experiment_declared_once_runs_from_the_cli_and_reads_back_everywhere(toy, tmp_path, capsys):
    assert "toy-experiment" in _subcommands()
    (tmp_path / "results").mkdir()
    out = tmp_path / "results" / "toy.json"
    assert main(["toy-experiment", "--figure", "2.25", "--out", str(out)]) == 0
    assert RAN[-1].drafter == "auto" and RAN[-1].figure == 2.25  # the options every lab command takes, and its own
    assert capsys.readouterr().out == "toy (the toy's machine): figure 2.25\n"
    assert isinstance(from_document(json.loads(out.read_text())), _ToyResult)
    assert report(out) == report(out, brief=True) == "toy (): figure 2.25"  # the setup its environment records
    assert main(["report", str(out)]) == 0 and capsys.readouterr().out == "toy (): figure 2.25\n"
    assert results_tables.render(out) == "toy (): figure 2.25"
    doc = tmp_path / "page.md"
    doc.write_text("<!-- table: toy -->\nold\n<!-- /table -->\n")
    assert results_tables.main(["--doc", str(doc), "--results", str(tmp_path / "results")]) == 0
    assert doc.read_text() == "<!-- table: toy -->\ntoy (): figure 2.25\n<!-- /table -->\n"


def test_without_its_declaration_the_toy_is_nowhere(tmp_path):
    assert experiment_named("toy-experiment") is None and "toy-experiment" not in _subcommands()
    path = tmp_path / "toy.json"
    _ToyResult(figure=1.0).save(path)
    with pytest.raises(PlaygroundError, match="cannot read"):
        report(path)


def test_the_declaration_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TOY.name = "other"


def test_the_docs_and_the_help_name_every_lab_command():
    """docs/cli.md shows a command line of each lab experiment, and `--help`'s summary lists them all, in order."""
    from playground.cli import entry  # its docstring is --help's summary

    lab = [e.name for e in experiments() if e.run is not None]
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert [name for name in lab if f"python -m playground {name} " not in page] == []
    assert f"  {', '.join(lab)}\n" in entry.__doc__


def test_report_of_a_script_result_missing_a_field_says_which_and_what_to_do(tmp_path, capsys):
    path = tmp_path / "kernels.json"
    doc = json.loads((ROOT / "docs" / "results" / "kernels-epyc.json").read_text())
    assert main(["report", str(path.with_name("whole.json"))]) == 2  # no such file: refused, not a traceback
    path.write_text(json.dumps({k: v for k, v in doc.items() if k != "sizes"}))
    assert main(["report", str(path)]) == 2
    assert "lacks what scripts/bench_kernels.py's table needs (KeyError: 'sizes'); rerun" in capsys.readouterr().err

"""Experiments by name: one declaration (`Experiment`) per kind of result, which every reader takes its experiments
from.

An experiment's name is the `experiment` field of the files it saves and, for a lab experiment (one with a `run`),
its command: the CLI builds a subcommand per lab experiment, `report FILE` prints a file with its `report` or
`table`, a saved file is read back as its `result` type, and scripts/results_tables.py draws the docs' tables the
same way. Adding an experiment is docs/cli.md's "Adding an experiment".

A declaration names its functions as "module:attribute" strings (or holds the callable), loaded when used: this
module imports nothing heavy (torch, transformers), since the CLI builds its parser from it.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import PlaygroundError

Ref = str | Callable[..., object]
"""A function or class: itself, or "package.module:attribute", imported on first use."""


@dataclass(frozen=True)
class Experiment:
    """One experiment, declared once: its result, how a result reads as text, and the command or script that runs
    it."""

    name: str
    """Its results' `experiment` field and, where it has a `run`, its command."""
    result: Ref | None = None
    """Its typed result (a playground.results.Result whose `experiment` is `name`); None: a script's plain JSON
    document, which its table reads as a dict."""
    table: Ref | None = None
    """table(result, setup) -> the text its command prints when it finishes (`setup`: the line naming the pair and
    the machine); also what `report FILE` prints, with the setup the result's environment records, unless `report`
    is given."""
    report: Ref | None = None
    """report(result) -> what `report FILE` prints, where that is not `table`'s text."""
    brief: Ref | None = None
    """brief(result) -> what `report --brief FILE` and the docs' tables show, where that is not `report`'s text."""
    help: str = ""
    """The command's one line in --help (a lab experiment)."""
    run: Ref | None = None
    """run(args) -> exit status: a lab command, parsed by playground.cli.experiments with the options every lab
    command takes, then `add_arguments`'s."""
    add_arguments: Ref | None = None
    """add_arguments(parser): the lab command's own options."""
    command: str = ""
    """The command that writes its results, where it is not its own lab command (e.g. `replay`, `timing`)."""
    script: str = ""
    """scripts/SCRIPT that writes its results, where no command does."""
    aliases: tuple[str, ...] = ()
    """Other names its command answers to (names it had before)."""

    def __post_init__(self):
        if not self.name:
            raise PlaygroundError("an experiment needs a name")
        if self.table is None and self.report is None:
            raise PlaygroundError(f"experiment {self.name!r} declares no table (table or report)")
        if (self.run is None) != (self.add_arguments is None) or (self.run is not None and not self.help):
            raise PlaygroundError(f"experiment {self.name!r}: a lab command declares run, add_arguments and help")
        if self.run is None and not (self.command or self.script):
            raise PlaygroundError(f"experiment {self.name!r} says neither its command (run or command) nor its script")

    def load(self, field: str) -> Any:
        """The function (or class) declared in `field`, imported where it is a "module:attribute" string."""
        ref = getattr(self, field)
        if not isinstance(ref, str):
            return ref
        module, _, attribute = ref.partition(":")
        return getattr(importlib.import_module(module), attribute)

    @property
    def commands(self) -> tuple[str, ...]:
        """The names its lab command answers to (none for another command's or a script's results)."""
        return (self.name, *self.aliases) if self.run is not None else ()


_EXPERIMENTS: dict[str, Experiment] = {}
_LOCK = threading.Lock()  # registration from a test or a plugin, while another thread reads


def register_experiment(experiment: Experiment) -> Experiment:
    """Declare an experiment (docs/cli.md, "Adding an experiment"); its name and aliases must be new."""
    with _LOCK:
        taken = {n for e in _EXPERIMENTS.values() for n in (e.name, *e.aliases)}
        clash = [n for n in (experiment.name, *experiment.aliases) if n in taken]
        if clash:
            raise PlaygroundError(f"an experiment named {clash[0]!r} is already registered")
        _EXPERIMENTS[experiment.name] = experiment
    return experiment


def unregister_experiment(name: str) -> None:
    """Remove a registered experiment (a test's toy)."""
    with _LOCK:
        _EXPERIMENTS.pop(name, None)


def experiments() -> list[Experiment]:
    """Every declared experiment, in registration order (the CLI's order)."""
    with _LOCK:
        return list(_EXPERIMENTS.values())


def experiment_named(name: str | None) -> Experiment | None:
    """The experiment called `name` (its results' name or one of its command's), or None."""
    return next((e for e in experiments() if name == e.name or name in e.aliases), None)


def result_type(kind: str | None) -> type | None:
    """The typed result of experiment `kind`'s files, or None (unknown, or a script's plain document)."""
    e = experiment_named(kind)
    if e is None or e.result is None or kind != e.name:
        return None
    cls = e.load("result")
    if getattr(cls, "experiment", None) != e.name:
        raise PlaygroundError(f"experiment {e.name!r} declares {cls.__name__} as its result, which saves "
                              f"{getattr(cls, 'experiment', None)!r} files")
    return cls


def _lab(name: str, job: str, help: str, **more) -> Experiment:
    """A lab command's declaration: run and add_arguments are cli.experiments' `<job>_run` and `<job>_args`."""
    return Experiment(name, help=help, run=f"playground.cli.experiments:{job}_run",
                      add_arguments=f"playground.cli.experiments:{job}_args", **more)


_REPORT = "playground.lab.report"
for _e in (
    _lab("timing", "timing", "target pass time over n = 1..n_max new tokens and the drafter's step: c and v(n)",
         result="playground.results.calibration:TimingResult", table=f"{_REPORT}:timing_table",
         report=f"{_REPORT}:timing_report"),
    _lab("acceptance", "acceptance", "alpha, per-position acceptance and tokens per pass per preset kind and k",
         result="playground.results.quality:AcceptanceResult", table=f"{_REPORT}:acceptance_table"),
    _lab("speed", "speed", "plain vs speculative at each k in alternating runs; measured beside predicted",
         result="playground.results.speed:SpeedResult", table=f"{_REPORT}:speed_table",
         report=f"{_REPORT}:speed_report", brief=f"{_REPORT}:speed_brief"),
    _lab("sweep", "sweep", "k = 1..8 on one preset or prompt: measured and predicted curves, break-even, best k",
         result="playground.results.speed:SweepResult", table=f"{_REPORT}:speed_table",
         report=f"{_REPORT}:speed_report", brief=f"{_REPORT}:speed_brief"),
    _lab("divergence", "divergence", "greedy runs that differ from plain greedy: near-tie or bug?",
         result="playground.results.quality:DivergenceResult", table=f"{_REPORT}:divergence_table"),
    _lab("distribution", "distribution",
         "first-token distribution through the exact and the two wrong rules (chi-square)",
         result="playground.results.quality:DistributionResult", table=f"{_REPORT}:distribution_table"),
    _lab("peers", "peers", "our loop against transformers' assisted generation and prompt lookup",
         result="playground.results.speed:PeersResult", table=f"{_REPORT}:peers_table", aliases=("bench-peers",)),
    # results another command writes
    Experiment("forwards", result="playground.results.calibration:ForwardsResult",
               table="playground.lab.forwards_report:forwards_text", command="timing"),  # timing --random-weights
    Experiment("batch", result="playground.results.calibration:BatchResult", table="playground.lab.batch:batch_table",
               command="timing"),  # timing --batch, and the browser's "Time batches"
    Experiment("replay", result="playground.results.replay:ReplayResult",
               report="playground.lab.replay.report:replay_table", command="replay"),
    Experiment("whatif", result="playground.results.calibration:WhatifResult",
               report="playground.lab.whatif:whatif_text", command="whatif"),
    Experiment("vllm-sweep", result="playground.results.vllm:VllmSweepResult",
               report="playground.backends.vllm_report:report_text", command="vllm-sweep"),
    # results a measurement script writes (scripts/NAME.py --out), whose tables the docs publish
    Experiment("static-forward", report="playground.studies.bench_static:markdown", script="bench_static.py"),
    Experiment("adaptive-rules", report="playground.studies.tune_adaptive:rules_markdown", script="tune_adaptive.py"),
    Experiment("kernels-blas-onednn", report="playground.studies.bench_kernels:markdown", script="bench_kernels.py"),
    Experiment("prefill-kv", report="playground.studies.bench_prefill:markdown", script="bench_prefill.py"),
    Experiment("replay-misses", report="playground.studies.replay_misses:markdown", script="replay_misses.py"),
    Experiment("overhead-streaming", report="playground.studies.bench_overhead:markdown", script="bench_overhead.py"),
    Experiment("suffix-history", report="playground.studies.suffix_history:markdown", script="suffix_history.py"),
    Experiment("suffix-factor", report="playground.studies.suffix_factor:markdown", script="suffix_factor.py"),
    Experiment("suffix-bound", report="playground.studies.suffix_bound:markdown", script="suffix_bound.py"),
    Experiment("grammar-libraries", report="playground.studies.grammar_libraries:markdown",
               script="grammar_libraries.py"),
    Experiment("trace-speed", report="playground.studies.trace_speed:markdown", script="trace_speed.py"),
    Experiment("constrained-speed", report="playground.studies.constrained_speed:markdown",
               script="constrained_speed.py"),
):
    register_experiment(_e)

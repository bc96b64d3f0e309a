"""The lab commands (timing, acceptance, speed, sweep, divergence, distribution, peers).

A lab command loads the pair, runs its experiment (playground.lab) on the presets or prompt given, prints
the result's tables (playground.lab.report, the same code `report FILE` uses) and, with --out, saves the
result as JSON with the drafter and the command line that produced it."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from ..constraints.schema import schema_from
from ..core.engine import K_MAX
from ..drafters.adaptive import parse_k
from ..drafters.registry import make_proposer
from ..envinfo import describe_setup, environment, redact
from ..errors import PlaygroundError
from ..inputs.presets import chosen_presets
from ..inputs.text import encode_prompt
from ..lab import acceptance, calibrate, distribution, divergence, peers
from ..lab.batch import batch_predictions, batch_timing
from ..lab.calibration import CalibrationPlan, pooled
from ..lab.quality import DistributionPlan
from ..lab.report import experiment_text
from ..lab.speed import SpeedRequest, speed, sweep
from ..lab.speed.schema import schema_arms
from ..lab.speed.trace import TraceTurns, own_writing, trace_turns, writing_note
from ..pairs.models import ModelPair
from ..results import Result
from ..results.calibration import BatchPredictions, TimingResult
from ..results.quality import AcceptanceResult, DistributionResult, DivergenceResult
from ..results.speed import PeersResult, SpeedResult, SweepResult
from .load import pair_from_args, sampling_of
from .progress import progress_bar


@dataclass
class Job:
    """One lab command's inputs: the pair, the k values, the prompts (name -> (kind, ids, max new tokens))."""

    args: argparse.Namespace
    pair: ModelPair
    ks: tuple
    prompts: dict[str, tuple[str, list[int], int]]
    progress: Callable[[float, str], None]
    memory: dict
    trace: TraceTurns | None = None  # --trace: the turns' histories

    def proposer(self, name: str | None = None):
        """A new proposer of the drafter asked for (each run starts its own); for a trace's turn `name`, one
        with a memory (DrafterSpec.new_memory) holds the responses before it."""
        made = self.trace.factory(self.args.drafter, self._make, name) if self.trace and name else None
        return made() if made is not None else self._make()

    def _make(self, **options):
        return make_proposer(self.pair, self.args.drafter, max_ngram=self.args.max_ngram, **options)

    def schema_options(self) -> dict:
        """speed / sweep --schema: the grammar every arm also runs constrained to, and the drafter's schema+ variant
        that runs the constrained arms (lab.speed.schema); none without --schema."""
        schema = getattr(self.args, "schema", None)  # commands without --schema have none
        return {} if schema is None else schema_arms(self.pair, self.args.drafter, schema, max_ngram=self.args.max_ngram)

    @property
    def ids(self) -> dict[str, list[int]]:
        return {name: ids for name, (_, ids, _) in self.prompts.items()}

    @property
    def lengths(self) -> dict[str, int]:
        """{prompt name: its max new tokens} (--max-new-tokens, else each preset's own)."""
        return {name: m for name, (_, _, m) in self.prompts.items()}

    @property
    def max_new(self) -> int:
        return max(m for _, _, m in self.prompts.values())

    @property
    def fixed_ks(self) -> list[int]:
        return [k for k in self.ks if isinstance(k, int)]


def timing_job(job: Job) -> TimingResult:
    ids = next(iter(job.ids.values()))
    n_max = max(job.fixed_ks) + 1
    batches = _parse_batches(job.args.batch)
    share = 1.0 if not batches else 0.4
    t = calibrate(job.pair, ids, job.proposer(), CalibrationPlan(n_max=n_max, sampling=sampling_of(job.args)),
                  progress=lambda f, m: job.progress(share * f, m))
    batch = None
    if batches:
        batch = batch_timing(job.pair, ids, batches, n_max=n_max,
                             progress=lambda f, m: job.progress(0.4 + 0.6 * f, m))
        batch.predictions = BatchPredictions(alpha=job.args.alpha, c=t.c, by_batch=batch_predictions(
            batch, t.c, job.args.alpha, t.overhead, ks=range(1, n_max)))
    return t.record(TimingResult, environment=environment(job.pair), memory=job.memory, batch=batch)


def _parse_batches(text: str | None) -> list[int]:
    if not text:
        return []
    try:
        batches = [int(b) for b in text.split(",")]
    except ValueError:
        raise PlaygroundError(f"--batch is comma-separated batch sizes, e.g. 1,2,4,8, got {text!r}") from None
    if any(not 1 <= b <= 64 for b in batches):
        raise PlaygroundError(f"batch sizes must be from 1 to 64, got {batches}")
    return batches


def _calibrations(job: Job, names: list[str]) -> dict:
    """One calibration per prompt, on its own context (a longer one costs more per step on both sides), in
    the first 30% of the progress bar. Verification is timed over up to max(k) + 1 tokens, or K_MAX + 1
    when adaptive k runs (it may draft that far). Timed under the command's decoding (a sampled run does the
    warpers, softmax and draws in every pass)."""
    n_max = (K_MAX if job.args.command == "sweep" or "adaptive" in job.ks else max(job.fixed_ks)) + 1
    share = 0.3 / len(names)
    plan = CalibrationPlan(n_max=n_max, repeats=8, sampling=sampling_of(job.args))
    timings = {name: calibrate(job.pair, job.ids[name], job.proposer(name), plan,
                               progress=lambda f, m, i=i, name=name: job.progress(share * (i + f), f"{name}: {m}"))
               for i, name in enumerate(names)}
    if any(t.c > 1 for t in timings.values()):
        print("WARNING: the drafter's step is slower than the target's", file=sys.stderr)
    return timings


def _rest_of_bar(job: Job) -> Callable[[float, str], None]:
    return lambda f, m: job.progress(0.3 + 0.7 * f, m)


def _spread(job: Job, timings: dict) -> Callable[[int], None] | None:
    """With --spread-calibration (the default): after each round but the last, a short calibration of every
    prompt, pooled with the ones before (lab.calibration.pooled) into `timings`, which the adaptive arm and the
    predictions read: a calibration made before the rounds sees one moment of a host whose speed may move between
    rounds, and its predictions then miss prompt by prompt in one direction (docs/results.md)."""
    if not job.args.spread_calibration:
        return None
    made = {name: [t] for name, t in timings.items()}
    n_max = max(max(t.verify_s) for t in timings.values())  # as the first calibrations timed

    def recalibrate(_round: int) -> None:
        for name, ids in job.ids.items():
            made[name].append(calibrate(job.pair, ids, job.proposer(name),
                                        CalibrationPlan(n_max=n_max, repeats=4, warmup=1, sampling=sampling_of(job.args))))
            timings[name] = pooled(made[name])
    return recalibrate


def speed_job(job: Job) -> SpeedResult:
    timings = _calibrations(job, list(job.ids))
    request = SpeedRequest(job.pair, job.ids, job.proposer, ks=job.ks, rounds=job.args.rounds,
                           max_new_tokens=job.lengths, sampling=sampling_of(job.args), timing=timings,
                           min_confidence=job.args.min_confidence, memory=job.args.memory,
                           plain_every=job.args.plain_every, **job.schema_options(),
                           proposers={n: partial(job.proposer, n) for n in job.ids} if job.trace else None)
    result = speed(request, progress=_rest_of_bar(job), between_rounds=_spread(job, timings))
    return replace(result, trace_note=job.trace.note) if job.trace else result


def sweep_job(job: Job) -> SweepResult:
    name, ids = next(iter(job.ids.items()))
    timing = _calibrations(job, [name])[name]
    request = SpeedRequest(job.pair, {name: ids}, job.proposer, ks=job.ks, rounds=job.args.rounds,
                           max_new_tokens=job.max_new, sampling=sampling_of(job.args), timing=timing,
                           min_confidence=job.args.min_confidence, plain_every=job.args.plain_every,
                           **job.schema_options())
    return sweep(request, progress=_rest_of_bar(job))


def acceptance_job(job: Job) -> AcceptanceResult:
    return acceptance(job.pair, job.prompts, job.proposer, ks=job.ks, sampling=sampling_of(job.args),
                      progress=job.progress)


def divergence_job(job: Job) -> DivergenceResult:
    return divergence(job.pair, job.ids, job.proposer, ks=job.ks, max_new_tokens=job.max_new, progress=job.progress)


def distribution_job(job: Job) -> DistributionResult:
    return distribution(job.pair, job.ids, job.proposer, DistributionPlan(sampling=sampling_of(job.args),
                                                                          draws=job.args.draws), job.progress)


def peers_job(job: Job) -> PeersResult:
    return peers(job.pair, job.ids, k=job.args.k, rounds=job.args.rounds, max_new_tokens=job.max_new,
                 max_ngram=job.args.max_ngram, progress=job.progress)


def cmd_lab(args: argparse.Namespace, run: Callable[[Job], Result | dict], default_ks: Sequence = (),
            schedules: bool = False) -> int:
    """Runs the experiment `run` (a job function above) as its declaration in cli/experiments.py says: the k values
    it runs without --ks, and whether --ks may name adaptive / heuristic (`schedules`)."""
    if args.rounds < 1:
        raise PlaygroundError(f"--rounds must be >= 1, got {args.rounds}")
    if args.draws < 1:
        raise PlaygroundError(f"--draws must be >= 1, got {args.draws}")
    if getattr(args, "plain_every", 1) < 1:  # speed and sweep only
        raise PlaygroundError(f"--plain-every must be >= 1, got {args.plain_every}")
    ks = _parse_ks(args.ks, default_ks)
    if not schedules and not all(isinstance(k, int) for k in ks):
        raise PlaygroundError(f"{args.command} takes fixed k values only; adaptive and heuristic run in speed and sweep")
    _check_trace_args(args)
    pair = pair_from_args(args)
    drafter = make_proposer(pair, args.drafter, max_ngram=args.max_ngram).describe()  # a bad drafter fails here
    trace = _trace(pair, args)
    prompts = trace.prompts if trace is not None else _lab_prompts(pair, args)
    setup = describe_setup(pair)
    memory = pair.memory_report()
    print(redact(f"# {pair.target_name} | drafter: {drafter} | {setup}"), file=sys.stderr)
    print("# memory: " + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in memory.items()
                                    if isinstance(v, int)), file=sys.stderr)
    job = Job(args=args, pair=pair, ks=ks, prompts=prompts, progress=progress_bar(), memory=memory, trace=trace)
    result = run(job)
    print(experiment_text(result, setup, kinds={name: kind for name, (kind, _, _) in prompts.items() if kind != name}))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(_saved(result, drafter, "python -m playground " + shlex.join(args.argv)), f, indent=1)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _saved(result: Result | dict, drafter: str, command: str) -> dict:
    """The document `--out` writes: the result with the drafter and the command line that produced it."""
    doc = result.to_dict() if isinstance(result, Result) else result
    for key, value in (("drafter", drafter), ("command", command)):
        if doc.get(key) is None:
            doc[key] = value
    return doc


def _check_trace_args(args: argparse.Namespace) -> None:
    """--trace takes the place of the presets and their lengths; --shape and --turns choose among its turns."""
    if getattr(args, "trace", None) is None:
        if getattr(args, "shape", None) is not None or getattr(args, "turns", None) is not None:
            raise PlaygroundError("--shape and --turns choose among the turns of a --trace FILE: give one")
    elif args.preset or args.prompt is not None or args.max_new_tokens is not None:
        raise PlaygroundError("--trace runs the trace's turns, each to its recorded length: leave out --preset, "
                              "--prompt and --max-new-tokens")
    elif getattr(args, "schema", None) is not None:
        raise PlaygroundError("--schema constrains presets or a prompt, not a --trace's turns (`replay` measures "
                              "a trace's schema, from its lines' tools)")
    if getattr(args, "schema", None) is not None:
        schema_from(args.schema)  # a bad schema is refused before the pair loads


def _trace(pair: ModelPair, args: argparse.Namespace) -> TraceTurns | None:
    """speed --trace FILE: the turns chosen (--shape, --turns), each to run with the history before it."""
    if getattr(args, "trace", None) is None:
        return None
    trace = trace_turns(pair, args.trace, args.shape, args.turns)
    for warning in trace.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"# {len(trace.prompts)} turns of {args.trace}" + (f" with {args.shape}" if args.shape else ""),
          file=sys.stderr)
    if not args.sample:  # sampled, no recording is the target's one output: nothing to check
        trace = replace(trace, note=writing_note(own_writing(pair, trace)))
        print(f"# {trace.note}", file=sys.stderr)
    return trace


def _lab_prompts(pair: ModelPair, args: argparse.Namespace) -> dict[str, tuple[str, list[int], int]]:
    """name -> (kind, prompt ids, max new tokens): the prompt given, the presets named, or one preset per kind
    (the first by name)."""
    if args.prompt is not None:
        return {"prompt": ("prompt", encode_prompt(pair.tokenizer, args.prompt), args.max_new_tokens or 64)}
    return {p.name: (p.kind, p.prompt_ids(pair.tokenizer), args.max_new_tokens or p.max_new_tokens)
            for p in chosen_presets(args.preset)}


def _parse_ks(text: str | None, default) -> tuple:
    if text is None:
        return tuple(default)
    try:
        ks = tuple(parse_k(x) for x in text.split(","))
    except PlaygroundError:
        raise PlaygroundError(f"--ks takes comma-separated k values (integers from 1 to 16, or adaptive / heuristic), "
                              f"got {text!r}") from None
    if not any(isinstance(k, int) for k in ks):
        raise PlaygroundError(f"--ks needs at least one fixed k (an integer 1..16) besides adaptive/heuristic, got {text!r}")
    return ks

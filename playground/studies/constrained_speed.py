"""What the schema is worth (issue 55): constrained decoding's speed on the JSON presets, measured on this machine by
scripts/constrained_speed.py; `markdown` draws docs/constraints.md's table from the saved JSON alone.

Per preset (a `Case`), every round runs, in adjacent runs on the same prompt, plain decoding without and with the
schema, and for each drafter X that has a schema+X partner in the registry (`partners`): X unconstrained, X
constrained and schema+X constrained, in lab.speed's rotating, bracketed order; each speculative run is divided by
plain decoding of its own kind (free or constrained), interpolated to its moment (lab.speed.run's `plain_at`).

Every run is a conversation's first call: each proposer is new (the registry builds it), so the suffix drafters start
with an empty cache and nothing but the prompt to copy from. Decoding is greedy, so every constrained run must write
exactly what constrained plain decoding wrote: `measure` checks it and refuses the result otherwise.

Quoted per preset: the forced share (schema+X's kept forced tokens over its output tokens, RunSummary.forced_share),
the mask's time per token (the constraint's work of a plain step, timed along the constrained output) against the
target's plain step, constrained over free plain tokens/s, each drafter's speed-ups, and schema+X over X (both
constrained, adjacent runs), for the best X too. Figures are medians with their interquartile range.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from ..core.engine import HEADLESS, plain_generate, speculative_generate
from ..core.records import Iteration, Step, summarize
from ..drafters.registry import available_drafters, drafters, make_proposer, schema_variant
from ..envinfo import describe_setup, environment
from ..errors import PlaygroundError
from ..lab.common import new_tokens, rotated
from ..lab.speed.run import bracketed, plain_at  # the plain speed at a run's moment, and the plain runs' places
from ..lab.trust import MachineMonitor, Verdict
from ..tables import markdown_table

EXPERIMENT = "constrained-speed"
PLAIN = "plain"
MASK_GOAL = 0.05  # the goal: the mask costs at most 5% of a target step


@dataclass(frozen=True)
class Case:
    """One preset: its prompt, its output schema compiled for the tokenizer (constraints.grammar.Grammar) and the
    most new tokens a run may write."""

    name: str
    prompt: Sequence[int]
    grammar: object
    max_new_tokens: int


@dataclass(frozen=True)
class Plan:
    """What `measure` runs: the drafters X (each with its schema+X, `partners`), k, rounds, a pair of plain runs
    before every `plain_every` drafters, the mask's timed walks, and the untimed warm-up's new tokens (0: none)."""

    partners: dict[str, str]
    k: int = 8
    rounds: int = 3
    plain_every: int = 2
    mask_walks: int = 3
    warmup_tokens: int = 4


def partners(pair, wanted: Sequence[str] | None = None) -> dict[str, str]:
    """{X: schema+X} for every drafter X this pair can run (in registration order, `wanted` only if given) whose
    schema+ drafter is registered and can run too."""
    can = set(available_drafters(pair))
    out = {s.name: schema_variant(s.name) for s in drafters() if s.name in can and schema_variant(s.name) in can}
    if wanted is not None:
        missing = [x for x in wanted if x not in out]
        if missing:
            raise PlaygroundError(f"no schema+ partner can run here for {', '.join(missing)}; "
                                  f"choose among {', '.join(out) or '(none)'}")
        out = {x: out[x] for x in wanted}
    return out


def arm_order(plan: Plan, r: int, index: int) -> list[tuple[str, bool]]:
    """Round `r`'s runs of the `index`-th preset, as (drafter or PLAIN, constrained), in the order they run."""
    out: list[tuple[str, bool]] = []
    for item in bracketed(rotated(list(plan.partners), r + index), plan.plain_every):
        if item == PLAIN:
            out += rotated([(PLAIN, False), (PLAIN, True)], r)
        else:
            out += rotated([(item, False), (item, True), (plan.partners[item], True)], r)
    return out


def emitted(records) -> list[int]:
    """The tokens a run wrote, in order."""
    return [t for x in records for t in (x.emitted if isinstance(x, Iteration) else (x.token,) if isinstance(x, Step)
                                         else ())]


def run_once(pair, case: Case, arm: tuple[str, bool], k: int, max_new: int | None = None) -> list:
    """One run's records: plain or a new proposer of the drafter (a first call), constrained or free."""
    drafter, constrained = arm
    constraint = case.grammar if constrained else None
    max_new = max_new or case.max_new_tokens
    if drafter == PLAIN:
        return list(plain_generate(pair, case.prompt, max_new_tokens=max_new, constraint=constraint))
    return list(speculative_generate(pair, case.prompt, proposer=make_proposer(pair, drafter), k=k,
                                     max_new_tokens=max_new, options=replace(HEADLESS, constraint=constraint)))


def _checked(case: Case, arm: tuple[str, bool], tokens: list[int], reference: list[int] | None) -> None:
    """Greedy: a constrained run writes what constrained plain wrote; a PlaygroundError names where it did not."""
    if reference is None or tokens == reference:
        return
    at = next((i for i, (a, b) in enumerate(zip(tokens, reference)) if a != b), min(len(tokens), len(reference)))
    raise PlaygroundError(f"{case.name}: {arm[0]} under the schema wrote other tokens than constrained plain decoding "
                          f"from output position {at} ({len(tokens)} against {len(reference)} tokens): greedy "
                          "speculative decoding must equal plain")


def _round(pair, case: Case, plan: Plan, r: int, index: int, state: dict) -> list[dict]:
    """One preset's runs of round `r`, each with its ratio to plain decoding of its kind at its moment.
    `state` keeps the preset's constrained plain output (the reference) and its free plain steps' seconds."""
    runs, plains = [], {False: [], True: []}
    for arm in arm_order(plan, r, index):
        start = time.perf_counter()
        records = run_once(pair, case, arm, plan.k)
        mid = (start + time.perf_counter()) / 2
        s, tokens = summarize(records), emitted(records)
        if arm == (PLAIN, True) and "reference" not in state:
            state["reference"] = tokens  # the round's order starts with its plain pair (bracketed)
        elif arm[1]:
            _checked(case, arm, tokens, state.get("reference"))
        if arm[0] == PLAIN:
            plains[arm[1]].append((mid, s))
            if not arm[1]:
                state.setdefault("steps", []).extend(x.seconds for x in records if isinstance(x, Step))
        runs.append({"round": r, "preset": case.name, "drafter": arm[0], "schema": arm[1], "mid": mid,
                     "tokens_per_s": s.tokens_per_s, "new_tokens": s.new_tokens, "decode_s": s.decode_s,
                     "tokens_per_pass": s.tokens_per_pass, "finished": s.finished, "roles": dict(s.roles),
                     "forced_share": s.forced_share if arm[0] != PLAIN else None})
    for run in runs:
        if run["drafter"] != PLAIN:
            plain = plain_at(plains[run["schema"]], run["mid"]).tokens_per_s
            run["ratio"] = run["tokens_per_s"] / plain if plain else None
    return runs


def mask_ms(pair, case: Case, tokens: list[int], walks: int) -> list[float]:
    """The constraint's work of each plain step along `tokens` (the constrained output), in ms, `walks` times over:
    the step's row masked, the next position's completeness asked, the matcher moved on (plain_generate's calls)."""
    logits = torch.zeros((1, pair.vocab_size))
    out = []
    for _ in range(walks):
        guide = case.grammar.guide(case.prompt, pair.vocab_size, pair.eos_ids)
        committed = [int(t) for t in case.prompt]
        for t in tokens:
            start = time.perf_counter()
            guide.rows(committed, (), logits)
            if t not in pair.eos_ids:
                guide.complete_at(committed, [t])
            committed.append(t)
            guide.commit(committed)
            out.append(1000 * (time.perf_counter() - start))
    return out


def warm_up(pair, cases: Sequence[Case], plan: Plan) -> None:
    """Every arm once on the first case, a few tokens each, untimed (a process's first passes run slow)."""
    if plan.warmup_tokens and cases:
        for arm in arm_order(plan, 0, 0):
            run_once(pair, cases[0], arm, plan.k, plan.warmup_tokens)


def measure(pair, cases: Sequence[Case], plan: Plan,
            progress: Callable[[str], None] | None = None) -> dict:
    """Every round of every case (see the module docstring), then the mask's walks; the result JSON-ready."""
    warm_up(pair, cases, plan)
    states: dict[str, dict] = {c.name: {} for c in cases}
    runs: list[dict] = []
    t0 = time.perf_counter()
    with MachineMonitor() as monitor:
        for r in range(plan.rounds):
            for index, case in enumerate(cases):
                runs += _round(pair, case, plan, r, index, states[case.name])
                if progress is not None:
                    progress(f"round {r + 1}/{plan.rounds}, {case.name}: {time.perf_counter() - t0:.0f} s")
    for run in runs:
        run["at_s"] = round(run.pop("mid") - t0, 3)
    masks = {c.name: mask_ms(pair, c, states[c.name]["reference"], plan.mask_walks) for c in cases}
    steps = {c.name: [1000 * x for x in states[c.name].get("steps", [])] for c in cases}
    return {"experiment": EXPERIMENT, "date": time.strftime("%Y-%m-%d"), "setup": describe_setup(pair),
            "environment": environment(pair).to_dict(), "k": plan.k, "rounds": plan.rounds,
            "plain_every": plan.plain_every, "calls": "first", "drafters": dict(plan.partners),
            "presets": [c.name for c in cases], "max_new_tokens": {c.name: c.max_new_tokens for c in cases},
            "prompt_tokens": {c.name: len(c.prompt) for c in cases},
            "machine": monitor.load.to_dict(), "verdict": Verdict.of(monitor.load.findings()).to_dict(),
            "equal_outputs": sum(1 for x in runs if x["schema"]),
            "summary": summary(runs, [c.name for c in cases], plan.partners, masks, steps), "runs": runs}


# --- the summary: medians and interquartile ranges ---------------------------------------------------------------


def quartiles(xs) -> dict | None:
    """Median, first and third quartile and n of the figures that are there; None where none is."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else (xs[0], xs[0], xs[0])
    return {"median": statistics.median(xs), "q1": q1, "q3": q3, "n": len(xs)}


def _paired(runs: list[dict], a: tuple[str, bool], b: tuple[str, bool]) -> list[float]:
    """a's tokens/s over b's, run for run in each preset and round (the i-th of each, in running order)."""
    out = []
    for key in sorted({(x["preset"], x["round"]) for x in runs}):
        cell = [x for x in runs if (x["preset"], x["round"]) == key]
        xs = [x for x in cell if (x["drafter"], x["schema"]) == a]
        ys = [y for y in cell if (y["drafter"], y["schema"]) == b]
        out += [x["tokens_per_s"] / y["tokens_per_s"] for x, y in zip(xs, ys) if y["tokens_per_s"]]
    return out


def _drafter_row(runs: list[dict], x: str, partner: str) -> dict:
    def ratios(drafter, schema):
        return quartiles(r["ratio"] for r in runs if r["drafter"] == drafter and r["schema"] == schema)

    return {"schema+": partner, "free": ratios(x, False), "constrained": ratios(x, True),
            "schema_constrained": ratios(partner, True),
            "schema_over_alone": quartiles(_paired(runs, (partner, True), (x, True))),
            "forced_share": quartiles(r["forced_share"] for r in runs if r["drafter"] == partner)}


def _preset_summary(runs: list[dict], pairs: dict[str, str], masks: list[float], steps: list[float]) -> dict:
    rows = {x: _drafter_row(runs, x, partner) for x, partner in pairs.items()}
    ranked = [x for x in rows if rows[x]["constrained"]]
    best = max(ranked, key=lambda x: rows[x]["constrained"]["median"]) if ranked else None
    mask, step = quartiles(masks), quartiles(steps)
    return {"drafters": rows, "best": best,
            "output_tokens": quartiles(r["new_tokens"] for r in runs if r["drafter"] == PLAIN and r["schema"]),
            "plain_tokens_per_s": {"free": quartiles(r["tokens_per_s"] for r in runs
                                                     if r["drafter"] == PLAIN and not r["schema"]),
                                   "constrained": quartiles(r["tokens_per_s"] for r in runs
                                                            if r["drafter"] == PLAIN and r["schema"])},
            "constrained_plain": quartiles(_paired(runs, (PLAIN, True), (PLAIN, False))),
            "mask_ms": mask, "step_ms": step,
            "mask_share": mask["median"] / step["median"] if mask and step and step["median"] else None}


def summary(runs: list[dict], presets: list[str], pairs: dict[str, str], masks: dict[str, list[float]],
            steps: dict[str, list[float]]) -> dict:
    """Per preset and over every preset ("all": each preset's runs pooled)."""
    out = {name: _preset_summary([x for x in runs if x["preset"] == name], pairs, masks[name], steps[name])
           for name in presets}
    if len(presets) > 1:
        out["all"] = _preset_summary(runs, pairs, [m for n in presets for m in masks[n]],
                                     [s for n in presets for s in steps[n]])
    return out


# --- the table ---------------------------------------------------------------------------------------------------


def _q(x: dict | None, fmt: str = ".2f", unit: str = "") -> str:
    """median [q1-q3]"""
    if not x:
        return "-"
    return f"{x['median']:{fmt}}{unit} [{x['q1']:{fmt}}-{x['q3']:{fmt}}]"


def _share(x: dict | None) -> str:
    return "-" if not x else f"{x['median']:.0%} [{x['q1']:.0%}-{x['q3']:.0%}]"


def _goals(doc: dict) -> list[str]:
    """The issue's goals, read from the medians: the mask's share of a step, schema+X against X per preset."""
    rows = {n: s for n, s in doc["summary"].items() if n != "all"}
    masks = [f"{n} {s['mask_share']:.2%}" for n, s in rows.items() if s["mask_share"] is not None]
    behind = [f"{n}/{x} {r['schema_over_alone']['median']:.2f}" for n, s in rows.items()
              for x, r in s["drafters"].items() if r["schema_over_alone"] and r["schema_over_alone"]["median"] < 1]
    cells = sum(1 for s in rows.values() for r in s["drafters"].values() if r["schema_over_alone"])
    return [f"Mask per token / target step (goal <= {MASK_GOAL:.0%}): {', '.join(masks) or '-'}.",
            f"schema+X / X, both constrained, first calls (goal >= 1): {cells - len(behind)} of {cells} preset and "
            f"drafter cells at or above 1" + (f"; below: {', '.join(behind)}." if behind else ".")]


def markdown(doc: dict) -> str:
    """Two tables: per preset (and over all), the schema's own figures; per preset and drafter, the speed-ups."""
    head = (f"{doc['date']}, {doc['setup']}; "
            f"verdict: {doc['verdict']['headline']}; k = {doc['k']}, {doc['rounds']} round{'s' * (doc['rounds'] != 1)}, "
            f"greedy, {new_tokens(doc['max_new_tokens'])}; every run a first call (new proposers: the suffix caches "
            "empty); "
            f"{doc['equal_outputs']} constrained runs, each equal to constrained plain. Median [interquartile range]; "
            f"speed-ups are tokens/s over plain decoding of the same kind (free or constrained) at the run's moment")
    presets = []
    for name, s in doc["summary"].items():
        best = s["drafters"].get(s["best"]) or {}
        presets.append([name, _q(s.get("output_tokens"), ".0f"), _share(best.get("forced_share")), _q(s["mask_ms"], ".3f"),
                        _q(s["step_ms"], ".1f"), "-" if s["mask_share"] is None else f"{s['mask_share']:.2%}",
                        _q(s["constrained_plain"]), s["best"] or "-", _q(best.get("schema_over_alone"))])
    drafters = [[name, x, _q(r["free"]), _q(r["constrained"]), _q(r["schema_constrained"]), _q(r["schema_over_alone"]),
                 _share(r["forced_share"])] for name, s in doc["summary"].items() for x, r in s["drafters"].items()]
    return "\n".join([head, "", markdown_table(
        ["preset", "output tokens", "forced share, schema+best", "mask per token (ms)", "target step (ms)", "mask / step",
         "constrained plain / plain", "best drafter", "schema+best / best"], presets), "", markdown_table(
        ["preset", "drafter X", "X, free", "X, constrained", "schema+X, constrained", "schema+X / X", "forced share"],
        drafters), "", *_goals(doc)])

"""Replay on the embedded pair: replaying the target's own greedy output reproduces live greedy runs, iteration by
iteration (k, accepted length, emitted tokens and roles), for every drafter, fixed k and the adaptive controller
(the same CostCurve on both sides), and the sample trace end to end.

Where a live run departs from the recorded greedy output, the test says where and why: the target's top two
tokens there are recomputed three ways (playground.lab.quality._recompute, as the divergence experiment does) and
the departure must be a floating-point near-tie (a gap within 8 spacings of the dtype, or within the
recomputations' own disagreement); anything else fails.

Runtime: the whole matrix (11 presets x k = 1..8 + adaptive x 4 drafters, 24 new tokens) is one live run per
cell, 396 runs (prompt lookup's 99 alone took 532 s on a loaded 2-core machine); CI runs the drafters on
CI_PRESETS at CI_KS and adaptive, prompt lookup on the COPYING presets too at k = 8 and adaptive. Set
PLAYGROUND_FULL_REPLAY_CHECK=1 for the whole matrix on every drafter.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from playground.cli import main
from playground.core.engine import HEADLESS, speculative_generate
from playground.core.records import Iteration
from playground.drafters.adaptive import CostCurve, make_controller
from playground.drafters.llamacpp import llama_cpp_available
from playground.drafters.registry import make_proposer
from playground.inputs.presets import preset_names
from playground.inputs.traces import SAMPLE_TRACE
from playground.lab.calibration import Timing
from playground.lab.quality import _recompute
from playground.lab.replay import ReplayOptions, preset_turns, replay_turns
from playground.lab.replay.report import _recommendation
from playground.results.replay import ShapeRecommendation, SimulatedIteration

FULL = os.environ.get("PLAYGROUND_FULL_REPLAY_CHECK") == "1"
MAX_NEW = 24
ALL_KS = tuple(range(1, 9))
CI_PRESETS = ("tool_call", "react", "prose")
COPYING = ("json_extract", "code_edit", "quote")  # where prompt lookup copies most: its accepted paths get walked
CI_KS = (1, 3, 8)
COPYING_KS = (8,)  # the longest copied paths; the adaptive controller runs on them too
TIMING = Timing(target_step_s=1.0, verify_s={n: 1.0 + 0.06 * (n - 1) for n in range(1, 18)}, draft_step_s=0.3,
                context_tokens=256, source_s={"lookup": (0.0, 0.01)})


def matrix(drafter: str) -> list[tuple[str, tuple[int, ...]]]:
    """(preset, fixed ks) to compare, each also with the adaptive controller."""
    if FULL:
        return [(name, ALL_KS) for name in preset_names()]
    copying = [(name, COPYING_KS) for name in COPYING] if drafter == "lookup" else []
    return [(name, CI_KS) for name in CI_PRESETS] + copying


@pytest.fixture(scope="module")
def embedded(embedded_threads):
    from playground.pairs.loading import load_pair

    return load_pair(progress=None)


@pytest.fixture(scope="module")
def turn_of(embedded):
    """A preset's turn (its completion: the target's greedy output, MAX_NEW tokens), generated on first use."""
    made = {}

    def get(name):
        if name not in made:
            made[name] = preset_turns(embedded, [name], max_new_tokens=MAX_NEW)[0]
        return made[name]

    return get


def _key(it) -> tuple:
    return it.k, it.n_accepted, tuple(it.emitted), tuple(it.roles), it.finished


def _sim_key(r: SimulatedIteration) -> tuple:
    return r.k, r.n_accepted, tuple(r.emitted), tuple(r.roles), r.finished


def explain(pair, turn, live: list, simulated: list[SimulatedIteration], k) -> str:
    """Why a live run's iterations differ from the replayed ones: a near-tie of the target (returned as a sentence),
    or an AssertionError naming the position."""
    emitted = [t for it in live for t in it.emitted]
    recorded = list(turn.completion_ids)
    pos = next((i for i, (a, b) in enumerate(zip(emitted, recorded)) if a != b), None)
    index = next(i for i, (a, b) in enumerate(zip([_key(it) for it in live], [_sim_key(r) for r in simulated]))
                 if a != b)
    assert pos is not None, (f"{turn.name} k={k}: iteration {index} differs although the live output is the recorded "
                             f"one: live {_key(live[index])}, replayed {_sim_key(simulated[index])}")
    verdict = _recompute(pair, list(turn.prompt_ids) + recorded[:pos], recorded[pos], emitted[pos], multi=MAX_NEW)
    assert verdict["verdict"] == "near-tie", (f"{turn.name} k={k}: the live run departs from the greedy output at "
                                              f"token {pos} and it is not a near-tie: {verdict}")
    return (f"{turn.name} k={k}: token {pos}: live {emitted[pos]} vs recorded {recorded[pos]}, logit gaps "
            f"{verdict['gaps']} against a spacing of {verdict['dtype_spacing']:.1e}: a floating-point near-tie")


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["lookup", "llama.cpp", "draft", "hybrid"])
def test_replaying_the_targets_greedy_output_reproduces_live_runs(embedded, turn_of, drafter, capsys):
    if drafter == "llama.cpp" and not llama_cpp_available()[0]:
        pytest.skip(f"llama.cpp drafter unavailable: {llama_cpp_available()[1]}")
    curve = CostCurve.from_timing(TIMING)
    notes, cells, started = [], 0, time.perf_counter()
    for name, ks in matrix(drafter):
        turn = turn_of(name)
        doc = replay_turns(embedded, [turn], ReplayOptions(drafters=[drafter], ks=ks, controllers=("adaptive",),
                                                           timing_of=lambda d, ids: TIMING, records="full"))
        t = doc.turns[0]
        for case in t.first_mismatches:  # the plain greedy output against the one teacher-forced pass
            assert case.near_tie or _recompute(embedded, list(turn.prompt_ids) + list(turn.completion_ids[
                :case.position]), case.recorded, case.target, MAX_NEW)["verdict"] == "near-tie", case
            notes.append(f"{name}: the teacher-forced pass and plain greedy differ at token {case.position} "
                         f"(gap {case.logit_gap:.2e}): a near-tie; the turn is replayed as an estimate")
        for arm in (*ks, "adaptive"):
            label = f"k={arm}" if isinstance(arm, int) else arm
            live = [r for r in speculative_generate(embedded, list(turn.prompt_ids),
                                                    proposer=make_proposer(embedded, drafter),
                                                    k=make_controller(arm, curve, memory={}), max_new_tokens=turn.max_new,
                                                    options=HEADLESS) if isinstance(r, Iteration)]
            simulated = t.drafters[drafter].walks[label].records
            cells += 1
            if [_key(it) for it in live] != [_sim_key(r) for r in simulated]:
                notes.append(explain(embedded, turn, live, simulated, arm))
    with capsys.disabled():
        print(f"\n{drafter}: {cells} live runs compared in {time.perf_counter() - started:.0f} s"
              + "".join(f"\n  {n}" for n in notes))


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["llama.cpp", "draft"])
def test_a_confidence_stop_replays_as_live_runs_stop(embedded, turn_of, drafter, capsys):
    """Both model drafters under a draft confidence stop (fed live in the replay): the iterations and every proposal
    drafted, so the cost, are the live run's (departures explained as near-ties, as above)."""
    if drafter == "llama.cpp" and not llama_cpp_available()[0]:
        pytest.skip(f"llama.cpp drafter unavailable: {llama_cpp_available()[1]}")
    curve, notes, stopped = CostCurve.from_timing(TIMING), [], 0
    for name in ("prose", "tool_call"):
        turn = turn_of(name)
        doc = replay_turns(embedded, [turn], ReplayOptions(drafters=[drafter], ks=(4, 16), controllers=("adaptive",),
                                                           timing_of=lambda d, ids: TIMING, records="full",
                                                           min_confidence=0.5))
        walks = doc.turns[0].drafters[drafter].walks
        for arm in (4, 16, "adaptive"):
            live = [r for r in speculative_generate(embedded, list(turn.prompt_ids),
                                                    proposer=make_proposer(embedded, drafter),
                                                    k=make_controller(arm, curve, memory={}), max_new_tokens=turn.max_new,
                                                    options=HEADLESS, min_confidence=0.5) if isinstance(r, Iteration)]
            simulated = walks[f"k={arm}" if isinstance(arm, int) else arm].records
            if [_key(it) for it in live] != [_sim_key(r) for r in simulated]:
                notes.append(explain(embedded, turn, live, simulated, arm))
                continue
            assert [r.drafted for r in simulated] == [len(it.proposed) for it in live], (name, arm)
            stopped += sum(0 < len(it.proposed) < it.k and not set(it.proposed) & set(embedded.eos_ids) for it in live)
    assert stopped > 0
    with capsys.disabled():
        print(f"\n{drafter} with a confidence stop of 0.5: {stopped} drafts stopped short of k"
              + "".join(f"\n  {n}" for n in notes))


@pytest.mark.slow
def test_the_sample_trace_replays_end_to_end(embedded, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("playground.cli.load.load_choice", lambda choice, progress=None: embedded)
    out = tmp_path / "replay.json"
    code = main(["replay", str(SAMPLE_TRACE), "--drafter", "lookup", "--ks", "1,2,4,8",
                 "--controllers", "heuristic", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out.read_text())
    assert len(doc["turns"]) == 25 and doc["errors"] == []
    shapes = doc["summary"]["shapes"]
    assert shapes["json"]["turns"] >= 10 and shapes["prose"]["turns"] >= 10
    for heading in ("### tool call / JSON:", "### prose:", "### overall: 25 turns"):
        assert heading in printed
    # a k, or none and why, as this host's speed makes it: the printed line says the result's, whichever it is (the
    # next test says both outcomes' words, on any host)
    recommended = doc["summary"]["overall"]["recommendation"]["recommended_k"]
    last = printed.split("### overall: 25 turns")[1].split("\ncalibration of")[0].strip().splitlines()[-1]
    assert last.startswith(f"recommended: lookup k={recommended}: " if recommended else "no recommended k: "), last


@pytest.mark.parametrize("speedup, recommended_k, withheld, said", [
    (1.8, 4, None, "recommended: lookup k=4: 1.80x [1.50-2.10] (an estimate: not every turn replays exactly)"),
    (0.97, None, "no k is predicted to beat plain decoding",
     "no recommended k: no k is predicted to beat plain decoding (best predicted: lookup k=4, 0.97x)"),
])
def test_the_printed_recommendation_says_the_k_or_why_none(speedup, recommended_k, withheld, said):
    rec = ShapeRecommendation(drafter="lookup", k=4, speedup=speedup, interval=[1.5, 2.1],
                              recommended_k=recommended_k, withheld=withheld, estimate=True)
    assert _recommendation(rec) == said

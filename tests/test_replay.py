"""Replay on tiny random models: agreement -> accepted lengths by hand, the walk against live runs (every drafter,
fixed k and both controllers), the shared pass against live feeding, the sampling acceptance against sum min(p, q) computed
directly, the walk in expectation against the walk, the per-shape summary and its recommendation rules, and the
command line end to end."""

import copy
import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from playground.cli import build_parser, main
from playground.cli.replay_args import FEEDINGS as CLI_FEEDINGS
from playground.core.cached import CachedLM
from playground.core.engine import FixedK, speculative_generate
from playground.core.records import Iteration
from playground.core.sampling import GREEDY, SamplingConfig, probabilities
from playground.drafters.adaptive import CostCurve, make_controller
from playground.drafters.proposers import DraftModelProposer
from playground.drafters.registry import make_proposer, names
from playground.errors import PlaygroundError
from playground.inputs.traces import TraceError, Turn
from playground.lab.calibration import Timing
from playground.lab.replay import FEEDINGS, ReplayOptions, greedy_turn, replay_table, replay_turns
from playground.lab.replay import summary as replay_summary
from playground.lab.replay.walk import PassProposer, expected_walk, replay_context, walk
from playground.results import FORMAT, load_result
from playground.results.replay import (
    CalibrationUse,
    ExpectedDrafter,
    ExpectedWalk,
    LineError,
    ReplayResult,
    SimulatedIteration,
    SimulatedWalk,
    SkippedWalk,
    TurnError,
    WalkedDrafter,
)
from tests.test_models import save
from tests.tiny import tiny_pair

EOS = 63
FORMAT1 = Path(__file__).parent / "data" / "replay-format1.json"  # saved by the replay before results were typed


def fake_timing(c=0.2, lookup_call=0.01):
    """A calibration with round numbers: c = 0.2, v(n) = 1 + 0.05 (n - 1), a lookup search of 0.01 steps."""
    return Timing(target_step_s=1.0, verify_s={n: 1 + 0.05 * (n - 1) for n in range(1, 18)}, draft_step_s=c,
                  context_tokens=16, source_s={"lookup": (0.0, lookup_call)})


@pytest.fixture(scope="module")
def pair(target64, drafts64):
    return tiny_pair(target64, drafts64["useful"], eos_ids=(EOS,))


@pytest.fixture(scope="module")
def turns(pair):
    prompts = [[1, 2, 3, 4, 5, 1, 2, 3], [7, 8, 9, 7, 8], [20, 21, 22, 23, 20, 21]]
    return [greedy_turn(pair, f"t{i}", p, 30, "text") for i, p in enumerate(prompts)]


def hand_walk(agree, k, completion=None, eos_at=None, max_new=None):
    """A walk over a 10-token completion whose drafter agrees with the target where `agree` says 1."""
    completion = completion or list(range(10, 20))
    pred = [c if a else 99 for c, a in zip(completion, agree)]
    proposer = PassProposer("hand", 3, completion, pred)  # the target's arg-max is the recorded token
    ctx = replay_context(GREEDY, "cpu", {EOS})
    return walk([1, 2, 3], completion, completion, proposer, FixedK(k), max_new or len(completion), ctx)


def test_agreement_gives_the_accepted_lengths_by_hand():
    w = hand_walk([1, 1, 0, 1, 1, 1, 0, 0, 1, 1], k=2)
    # from 0: two accepted + bonus; from 3: two + bonus; 6: rejected; 7: rejected; 8: k clipped to 1 (2 tokens left)
    assert [it.n_accepted for it in w.records] == [2, 2, 0, 0, 1]
    assert [it.k for it in w.records] == [2, 2, 2, 2, 1]
    assert [it.roles[-1] for it in w.records] == ["bonus", "bonus", "correction", "correction", "bonus"]
    assert [it.emitted for it in w.records][-1] == (18, 19) and w.records[-1].finished == "length"
    assert w.drafted == [2, 2, 2, 2, 1]  # a model drafter drafts all k, the rejected ones included
    assert all(it.draft_s == it.verify_s == it.elapsed_s == 0.0 for it in w.records)
    w = hand_walk([1] * 10, k=4)
    assert [it.n_accepted for it in w.records] == [4, 4]  # 4 + bonus, then k = min(4, 5 left - 1) = 4 + bonus
    w = hand_walk([1] * 10, k=6)
    assert [(it.k, it.n_accepted) for it in w.records] == [(6, 6), (2, 2)]  # 7 tokens, then k clipped to 3 - 1
    w = hand_walk([0] * 10, k=3)
    assert [it.n_accepted for it in w.records] == [0] * 10 and [len(it.proposed) for it in w.records] == [1] * 9 + [0]
    assert w.drafted == [3] * 7 + [2, 1, 0]  # k clipped to the tokens left - 1; the last a plain step


def test_an_end_of_sequence_token_ends_the_walk_as_the_engine_ends_a_run():
    completion = [10, 11, 12, EOS]
    w = hand_walk([1, 1, 1, 1], k=8, completion=completion, max_new=20)
    assert [it.n_accepted for it in w.records] == [4] and w.records[0].emitted == tuple(completion)
    assert w.records[0].finished == "eos" and w.drafted == [4]  # the drafter stopped at the end token


def test_on_a_text_the_target_did_not_write_acceptance_is_agreement_with_the_target():
    completion = list(range(10, 20))
    target = [*completion[:1], 50, *completion[2:]]  # after the recorded text the target would write 50 at 1
    proposer = PassProposer("hand", 3, target, list(target))  # a drafter that always agrees with the target
    w = walk([1, 2, 3], completion, target, proposer, FixedK(3), 10, replay_context(GREEDY, "cpu", {EOS}))
    assert [it.n_accepted for it in w.records] == [3, 3, 1]  # agreement everywhere: every proposal counts
    assert w.records[0].proposed == (10, 50, 12) and w.records[0].emitted == (10, 11, 12, 13)  # on along the text
    assert [t for it in w.records for t in it.emitted] == completion


@pytest.mark.parametrize("drafter", ["draft", "lookup", "hybrid"])
def test_the_walk_is_the_live_run(pair, turns, drafter):
    timing = fake_timing()
    curve = CostCurve.from_timing(timing)
    arms = [1, 2, 3, 5, 8, "adaptive", "heuristic"]
    doc = replay_turns(pair, turns, ReplayOptions(drafters=[drafter], ks=[1, 2, 3, 5, 8],
                                                  timing_of=lambda d, ids: timing))
    assert doc.errors == [] and all(t.exact for t in doc.turns)
    for t, turn in zip(doc.turns, turns):
        for arm in arms:
            label = f"k={arm}" if isinstance(arm, int) else arm
            live = [r for r in speculative_generate(pair, list(turn.prompt_ids), proposer=make_proposer(pair, drafter),
                                                    k=make_controller(arm, curve, memory={}),
                                                    max_new_tokens=turn.max_new) if isinstance(r, Iteration)]
            simulated = t.drafters[drafter].walks[label].records
            assert [(it.k, it.n_accepted, list(it.emitted), list(it.roles), it.finished) for it in live] == \
                [(r.k, r.n_accepted, list(r.emitted), list(r.roles), r.finished) for r in simulated], \
                (t.name, label)
            assert all(r.simulated and r.draft_s == 0.0 for r in simulated)
            for it, r in zip(live, simulated):  # the decided proposals are the live ones
                assert list(it.proposed[: len(r.proposed)]) == list(r.proposed)
                assert (it.sources or [None])[0] == (r.sources or [None])[0]
            if arm == "adaptive":  # it stops the drafter on its confidence: the walk drafts (and costs) as much
                # (but past an end-of-sequence token a walk stopped at a rejection cannot see, the module's docstring)
                assert [r.drafted for r, it in zip(simulated, live) if EOS not in it.proposed] == \
                    [len(it.proposed) for it in live if EOS not in it.proposed], t.name


@pytest.mark.parametrize("drafter", ["draft", "hybrid"])
@pytest.mark.parametrize("threshold", [0.5, 0.9])
def test_a_confidence_stop_replays_as_it_runs_live(pair, turns, drafter, threshold):
    """With a draft confidence stop the drafter stops where a live run's does, not at a rejection: every proposal
    of the live run is replayed (and costed), and the iterations are the live ones."""
    timing = fake_timing()
    curve = CostCurve.from_timing(timing)
    doc = replay_turns(pair, turns, ReplayOptions(drafters=[drafter], ks=[2, 8], timing_of=lambda d, ids: timing,
                                                  min_confidence=threshold))
    assert doc.min_confidence == threshold and "confidence stop" in doc.records_note
    assert f"draft confidence stop {threshold:g}" in replay_table(doc).splitlines()[0]
    stopped = 0
    for t, turn in zip(doc.turns, turns):
        assert t.drafters[drafter].feeding == "live"
        for arm in (2, 8, "adaptive", "heuristic"):
            label = f"k={arm}" if isinstance(arm, int) else arm
            live = [r for r in speculative_generate(pair, list(turn.prompt_ids), proposer=make_proposer(pair, drafter),
                                                    k=make_controller(arm, curve, memory={}),
                                                    max_new_tokens=turn.max_new, min_confidence=threshold)
                    if isinstance(r, Iteration)]
            simulated = t.drafters[drafter].walks[label].records
            assert [(it.k, list(it.proposed), it.n_accepted, list(it.emitted), it.finished) for it in live] == \
                [(r.k, list(r.proposed), r.n_accepted, list(r.emitted), r.finished) for r in simulated], \
                (t.name, label)
            assert [r.drafted for r in simulated] == [len(it.proposed) for it in live]
            stopped += sum(0 < len(it.proposed) < it.k and not set(it.proposed) & {EOS} for it in live)
    assert stopped > 0  # the threshold stopped some drafts short of k, so the test saw the stop


def test_a_confidence_stop_replays_a_text_the_target_did_not_write_as_an_estimate(pair, turns):
    """Under a stop even a completion written by another model is walked with the live-fed drafter: it replays to
    the end along the recorded text, is labelled an estimate, and costs every proposal the drafter made."""
    other = Turn("other", turns[0].prompt_ids, tuple((t + 7) % 60 for t in turns[0].completion_ids[:20]))
    doc = replay_turns(pair, [other], ReplayOptions(drafters=["draft"], ks=[4], controllers=("adaptive",),
                                                    timing_of=lambda d, ids: fake_timing(), min_confidence=0.5))
    assert doc.errors == []
    (t,) = doc.turns
    entry = t.drafters["draft"]
    assert not t.exact and not entry.exact and entry.feeding == "live"
    for walk_doc in entry.walks.values():
        assert sum(len(r.emitted) for r in walk_doc.records) == len(other.completion_ids)
        assert [r.drafted for r in walk_doc.records] == [len(r.proposed) for r in walk_doc.records]


def test_a_confidence_stop_is_refused_where_replay_cannot_apply_it(pair, turns):
    for bad, kwargs, says in [(1.5, {}, "probability in [0, 1]"), (True, {}, "probability in [0, 1]"),
                              (0.5, {"feeding": "shared"}, "needs live feeding"),
                              (0.5, {"sampling": SamplingConfig(do_sample=True)}, "greedy decoding only")]:
        with pytest.raises(PlaygroundError, match=re.escape(says)):
            replay_turns(pair, turns[:1], ReplayOptions(drafters=["draft"], ks=[2], min_confidence=bad, **kwargs))


def test_a_draft_that_copies_the_target_walks_as_it_runs_live(target64, turns, monkeypatch):
    """A draft that is a perturbed copy of the target (as the int8 draft is) copies the target's prompt KV live;
    replay hands its drafters the same prompt cache, and the walk is still the live run."""
    noisy = copy.deepcopy(target64)
    with torch.no_grad():
        for p in noisy.parameters():
            p.add_(0.02 * torch.randn_like(p))
    pair = dataclasses.replace(tiny_pair(target64, noisy, eos_ids=(EOS,)), draft_copies_target=True)
    seen = []
    real_begin = DraftModelProposer.begin

    def begin(self, prompt_ids, ctx):
        seen.append(ctx.target_kv is not None and ctx.target_kv.tokens == list(prompt_ids[:-1]))
        return real_begin(self, prompt_ids, ctx)

    monkeypatch.setattr(DraftModelProposer, "begin", begin)
    doc = replay_turns(pair, turns, ReplayOptions(drafters=["draft"], ks=[2, 5], controllers=(),
                                                  timing_of=lambda d, ids: fake_timing()))
    assert seen and all(seen)
    for t, turn in zip(doc.turns, turns):
        for k in (2, 5):
            records = list(speculative_generate(pair, list(turn.prompt_ids), proposer=make_proposer(pair, "draft"),
                                                k=k, max_new_tokens=turn.max_new))
            assert records[0].draft_shared == len(turn.prompt_ids) - 1
            live = [(it.k, it.n_accepted, list(it.emitted)) for it in records[1:]]
            simulated = [(r.k, r.n_accepted, list(r.emitted)) for r in t.drafters["draft"].walks[f"k={k}"].records]
            assert live == simulated, (t.name, k)


def test_the_shared_pass_equals_live_feeding_for_a_drafter_whose_logits_do_not_depend_on_feeding(pair, turns):
    timing = fake_timing()
    foreign = Turn("foreign", (1, 2, 3, 4, 5, 1, 2, 3), tuple(range(30, 50)))  # not what the tiny target writes
    docs = [replay_turns(pair, [*turns, foreign], ReplayOptions(drafters=["draft", "hybrid"], ks=[1, 4],
                                                                timing_of=lambda d, ids: timing, feeding=f))
            for f in ("live", "shared")]
    for a, b in zip(*(d.turns for d in docs)):
        for drafter in ("draft", "hybrid"):
            wa, wb = a.drafters[drafter].walks, b.drafters[drafter].walks
            assert {k: w.predicted_speedup for k, w in wa.items() if k != "adaptive"} == \
                {k: w.predicted_speedup for k, w in wb.items() if k != "adaptive"}
            # adaptive k stops the drafter on its confidence, after a rejected proposal too, where one shared pass reads
            # the drafter's confidence along the recorded text (an estimate): the same iterations, and the same
            # proposals drafted wherever none was rejected
            ra, rb = wa["adaptive"].records, wb["adaptive"].records
            assert [(r.k, r.n_accepted, r.emitted) for r in ra] == [(r.k, r.n_accepted, r.emitted)
                                                                             for r in rb]
            assert [x.drafted for x, y in zip(ra, rb) if x.n_accepted == len(x.proposed)] == \
                [y.drafted for x, y in zip(ra, rb) if x.n_accepted == len(x.proposed)]
            assert not b.drafters[drafter].exact and a.drafters[drafter].exact == (a.name != "foreign")
            assert b.drafters[drafter].feeding == "shared pass"
            assert a.drafters[drafter].feeding == ("live" if a.name != "foreign" else "shared pass")
            assert all(v == [] for v in a.drafters[drafter].chunking_differs.values())
    assert not docs[0].turns[-1].exact and "not the target's greedy output" in docs[0].turns[-1].estimate_reason


def test_sampling_acceptance_is_sum_min_p_q_computed_directly(pair, turns):
    sampling = SamplingConfig(do_sample=True, temperature=0.8, top_k=20, top_p=0.95)
    doc = replay_turns(pair, turns[:1], ReplayOptions(drafters=["draft", "lookup"], ks=[1, 3], sampling=sampling,
                                                      timing_of=lambda d, ids: fake_timing()))
    turn, entry = turns[0], doc.turns[0]
    assert doc.controllers == [] and entry.exact is False and "estimate" in entry.estimate_reason
    seq = list(turn.prompt_ids) + list(turn.completion_ids)
    n = len(turn.prompt_ids)
    with torch.no_grad():
        lt = CachedLM(pair.target, "cpu", pair.vocab_size).feed(seq[:-1])[n - 1:]
        ld = CachedLM(pair.draft, "cpu", pair.vocab_size).feed(seq[:-1])[n - 1:]
    direct = torch.minimum(probabilities(lt, sampling), probabilities(ld, sampling)).sum(-1)
    assert entry.drafters["draft"].agreement == pytest.approx(direct.tolist(), abs=1e-5)
    walks = entry.drafters["draft"].walks
    # k = 1 in expectation: every iteration accepts with beta at its start; per-position acceptance is its mean
    assert 0 < walks["k=1"].per_position[0] < 1 and walks["k=3"].predicted_speedup > 0
    for w in walks.values():  # every token is emitted once: j + 1 per drafting iteration accepting j, 1 per plain step
        drafting = sum(w.histogram.values())
        emitted = sum((int(j) + 1) * p for j, p in w.histogram.items()) + (w.iterations - drafting)
        assert emitted == pytest.approx(len(turn.completion_ids))


def test_the_walk_in_expectation_with_certain_acceptance_is_the_walk(target64, drafts64):
    # no end-of-sequence token: a live drafter that proposes one stops drafting there, which the walk in expectation
    # (made for sampling, where proposals are draws) does not know
    pair = tiny_pair(target64, drafts64["useful"])
    turns = [greedy_turn(pair, f"t{i}", p, 30, "text") for i, p in enumerate([[1, 2, 3, 4, 5, 1, 2, 3], [7, 8, 9]])]
    doc = replay_turns(pair, turns, ReplayOptions(drafters=["draft"], ks=[1, 2, 5], controllers=(),
                                                  timing_of=lambda d, ids: fake_timing()))
    curve = CostCurve.from_timing(fake_timing())
    for t in doc.turns:
        agree = t.drafters["draft"].agreement
        for k in (1, 2, 5):
            ew = expected_walk(lambda i, agree=agree: agree[i: i + 16], lambda i, k_i: k_i, lambda i: None, k,
                               t.completion_tokens, curve)
            w = t.drafters["draft"].walks[f"k={k}"]
            assert ew.predicted_speedup == pytest.approx(w.predicted_speedup)
            assert ew.iterations == pytest.approx(w.iterations)
            assert {a: pytest.approx(c) for a, c in w.histogram.items()} == ew.histogram


def test_the_summary_pools_turns_and_withholds_what_it_cannot_trust(pair, turns):
    doc = replay_turns(pair, turns, ReplayOptions(drafters=["draft", "lookup"], ks=[1, 2, 4],
                                                  controllers=("heuristic",), timing_of=lambda d, ids: fake_timing()))
    overall = doc.summary.overall
    row = overall.drafters["draft"]
    tokens = sum(t.drafters["draft"].walks["k=2"].new_tokens for t in doc.turns)
    cost = sum(t.drafters["draft"].walks["k=2"].cost for t in doc.turns)
    assert row.speedup["k=2"] == pytest.approx(tokens / cost) and row.turns == 3 == row.exact_turns
    lo, hi = row.interval
    assert lo <= row.best_speedup <= hi
    rec = overall.recommendation
    assert rec.recommended_k == rec.k and rec.withheld is None and rec.drafter in ("draft", "lookup")
    # two turns are not enough; an untrusted calibration (the drafter slower than the target) recommends nothing
    few = replay_turns(pair, turns[:2], ReplayOptions(drafters=["draft"], ks=[1, 2], controllers=(),
                                                      timing_of=lambda d, ids: fake_timing()))
    assert "only 2 turn(s)" in few.summary.overall.recommendation.withheld
    slow = replay_turns(pair, turns, ReplayOptions(drafters=["draft"], ks=[1, 2], controllers=(),
                                                   timing_of=lambda d, ids: fake_timing(1.5)))
    rec = slow.summary.overall.recommendation
    assert rec.recommended_k is None and "not trusted" in rec.withheld and "slower than the target" in rec.withheld
    none = replay_turns(pair, turns, ReplayOptions(drafters=["lookup"], ks=[1, 2], controllers=("adaptive",)))
    assert none.summary.overall.recommendation.withheld.startswith("no calibration")
    assert none.turns[0].drafters["lookup"].walks["adaptive"].skipped
    assert replay_summary.interval([5, 5], [2.5, 2.5]) == [2.0, 2.0]


def test_bad_turns_are_errors_and_the_rest_replays(pair, turns):
    bad = [Turn("empty", (1, 2), ()), Turn("oov", (1, 2), (500,)),
           Turn("past the end", (1, 2), (3, 4), max_new_tokens=9), turns[0]]
    doc = replay_turns(pair, bad, ReplayOptions(drafters=["lookup"], ks=[1], controllers=()))
    assert [t.name for t in doc.turns] == ["t0"]
    assert [e.turn for e in doc.errors] == ["empty", "oov", "past the end"]
    assert "outside the vocabulary" in doc.errors[1].message and "past the recorded" in doc.errors[2].message
    json.dumps(doc.to_dict())


def test_a_replay_result_round_trips_through_its_file(pair, turns, tmp_path):
    """Every kind of walk (simulated with full or compact records, in expectation, skipped) and both kinds of error
    save and load back equal, as the types they were made with, and print the same tables."""
    timing = fake_timing()
    greedy = replay_turns(pair, [*turns[:2], Turn("oov", (1, 2), (500,))], ReplayOptions(
        drafters=["lookup", "draft"], ks=[1, 2], timing_of=lambda d, ids: timing if d == "lookup" else None,
        errors=[TraceError(3, "completion", "missing")]))
    compact = replay_turns(pair, turns[:1], ReplayOptions(drafters=["draft"], ks=[2], controllers=(),
                                                          records="compact"))
    sampled = replay_turns(pair, turns[:1], ReplayOptions(drafters=["draft", "hybrid"], ks=[2],
                                                          sampling=SamplingConfig(do_sample=True, temperature=0.8),
                                                          timing_of=lambda d, ids: timing))
    sampled.calibration = CalibrationUse("once", 1, 0)
    for i, result in enumerate((greedy, compact, sampled)):
        path = tmp_path / f"replay{i}.json"
        result.save(path)
        assert json.loads(path.read_text())["format"] == FORMAT
        back = load_result(path)
        assert isinstance(back, ReplayResult) and back == result
        assert replay_table(back) == replay_table(result)
    entry = greedy.turns[0].drafters["draft"]
    assert isinstance(entry, WalkedDrafter) and isinstance(entry.walks["adaptive"], SkippedWalk)
    assert isinstance(entry.walks["k=1"].records[0], SimulatedIteration)
    assert [type(e) for e in greedy.errors] == [LineError, TurnError]
    assert isinstance(compact.turns[0].drafters["draft"].walks["k=2"].records[0], tuple)
    assert isinstance(sampled.turns[0].drafters["hybrid"], ExpectedDrafter)
    assert isinstance(sampled.turns[0].drafters["hybrid"].walks["k=2"], ExpectedWalk)


def test_a_replay_file_saved_before_results_were_typed_loads_and_keeps_its_keys(tmp_path):
    for name, doc in json.loads(FORMAT1.read_text()).items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        result = load_result(path)
        assert isinstance(result, ReplayResult) and "format" not in doc
        saved = result.to_dict()
        assert saved.pop("format") == FORMAT and json.dumps(saved) == json.dumps(doc)  # the same keys, in order
        assert replay_table(result).startswith("replay (tiny-target; a CPU; 2 cores; 1 torch threads")
    greedy, sampled = (load_result(tmp_path / f"{name}.json") for name in ("greedy", "sampled"))
    assert [type(e) for e in greedy.errors] == [LineError, TurnError] and greedy.calibration == "once"
    assert greedy.drafters == ["lookup", "suffix", "suffix (no cache)"]
    walks = greedy.turns[0].drafters["lookup"].walks
    assert isinstance(walks["k=1"], SimulatedWalk) and isinstance(walks["k=1"].records[0], SimulatedIteration)
    assert isinstance(greedy.turns[0].drafters["suffix"].walks["adaptive"], SkippedWalk)
    assert isinstance(sampled.turns[0].drafters["draft"].walks["k=2"], ExpectedWalk)
    assert sampled.calibration == CalibrationUse("once", 1, 0)


def test_the_cli_and_the_library_name_the_same_drafters():
    (drafter,) = [a for a in _replay_parser()._actions if a.dest == "drafter"]
    assert tuple(drafter.choices) == tuple(names()) and tuple(CLI_FEEDINGS) == tuple(FEEDINGS)


def _replay_parser():
    (sub,) = [a for a in build_parser()._actions if a.dest == "command"]
    return sub.choices["replay"]


def test_the_replay_command_end_to_end(tmp_path, capsys):
    t, d = save(tmp_path, "target", 0), save(tmp_path, "draft", 1)
    trace = tmp_path / "trace.jsonl"
    lines = [json.dumps({"prompt": f"w1 w2 w3 w{i} w1 w2", "completion": " w3 w4 w5 w1 w2 w3 w4 w9 w9 w1"})
             for i in range(4)] + ['{"prompt": 3}']
    trace.write_text("\n".join(lines) + "\n")
    out = tmp_path / "replay.json"
    code = main(["replay", str(trace), "--target", str(t), "--draft", str(d), "--device", "cpu", "--ks", "1,2,3",
                 "--drafter", "draft", "--drafter", "lookup", "--records", "compact", "--calibration", "bucket",
                 "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    doc = json.loads(out.read_text())  # the file's keys, as saved
    assert doc["experiment"] == "replay" and len(doc["turns"]) == 4 and doc["errors"][0]["line"] == 5
    assert doc["errors"][0]["field"] == "prompt" and "line 5: field 'prompt'" in printed.err
    assert all(not t["exact"] for t in doc["turns"])  # text the tiny target did not write: an estimate
    assert isinstance(doc["turns"][0]["drafters"]["draft"]["walks"]["k=2"]["records"][0], list)
    assert doc["command"].startswith("python -m playground replay") and doc["calibration"] == "bucket"
    assert len(doc["timings"]["draft"]) == 1  # the four prompts share one context-length bucket
    result = load_result(out)
    assert isinstance(result, ReplayResult) and result.turns[0].drafters["draft"].walks["k=2"].records[0][0] == 2
    assert "| drafter | k=1 | k=2 | k=3 | adaptive | heuristic | best k |" in printed.out
    assert "### overall: 4 turns" in printed.out and "torch threads" in printed.out.split("\n")[0]
    assert main(["report", str(out)]) == 0
    assert capsys.readouterr().out.strip() == printed.out.strip()

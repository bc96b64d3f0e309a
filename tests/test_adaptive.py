"""k per iteration (adaptive, transformers' heuristic) and the hybrid drafter, on tiny random models."""

import dataclasses
import itertools

import numpy as np
import pytest
import torch

from playground import lab
from playground.core.engine import K_MAX, FixedK, LoopOptions, plain_generate, speculative_generate
from playground.core.records import Iteration, Step, summarize
from playground.core.rules import accept_resample_target, accept_sample
from playground.core.sampling import SamplingConfig
from playground.drafters.adaptive import (
    AdaptiveK,
    AdaptiveSettings,
    CostCurve,
    HeuristicK,
    make_controller,
    parse_k,
)
from playground.drafters.proposers import DraftModelProposer, HybridProposer, PromptLookupProposer
from playground.errors import PlaygroundError
from playground.lab.speed import SpeedRequest, speed, sweep
from tests.test_engine import PROMPTS, chi2, exact_joint, first_catch
from tests.tiny import tiny_model, tiny_pair


def it(k, n_accepted, proposed=None, source=None):
    """A minimal iteration record: k proposals, the first n_accepted accepted (all from `source`, if given)."""
    proposed = tuple(range(k)) if proposed is None else proposed
    emitted = tuple(proposed[:n_accepted]) + (99,)
    return Iteration(index=0, k=k, proposed=proposed, n_accepted=n_accepted, emitted=emitted,
                     roles=("accepted",) * n_accepted + ("correction",), draft_s=0, verify_s=0, rollback_s=0,
                     elapsed_s=0, sources=(source,) * len(proposed) if source is not None else None)


PLAIN_STEP = Iteration(0, 0, (), 0, (5,), ("plain",), 0, 0, 0, 0)


def run_rejected(ctl, n):
    """n iterations in which every proposal is rejected; the k the controller chose each time."""
    ks = []
    for _ in range(n):
        k = ctl.next_k()
        ks.append(k)
        ctl.observe(it(k, 0) if k else PLAIN_STEP)
    return ks


FLAT_CHEAP = CostCurve(c=0.05, v={n: 1.0 for n in range(1, 10)})


def test_adaptive_drafts_deep_when_proposals_are_accepted_and_cheap():
    ctl = AdaptiveK(FLAT_CHEAP, k_max=8)
    for _ in range(10):
        ctl.observe(it(8, 8))
    assert ctl.next_k() == 8
    assert all(a > 0.9 for a in ctl.estimates())


def test_adaptive_stops_drafting_when_nothing_is_accepted_and_probes_again():
    ctl = AdaptiveK(CostCurve(c=0.3, v={n: 1.0 + 0.1 * (n - 1) for n in range(1, 10)}), k_max=8,
                    settings=AdaptiveSettings(probe_every=3))
    for _ in range(10):
        ctl.observe(it(2, 0))
    ks = run_rejected(ctl, 8)
    assert ks[:3] == [0, 0, 0]  # drafting cannot pay
    assert ks[3] == 4  # ... but it looks again after probe_every plain steps, at the k that pays at the prior
    assert ks[3] == ctl._probe_k(None)


def test_adaptive_follows_a_change_of_text_within_one_response():
    """Prose (first draft position rejected) then JSON (everything accepted): k must rise."""
    curve = CostCurve(c=0.2, v={1: 1.0, 2: 1.0, 3: 1.07, 4: 1.45, 5: 1.5, 6: 1.56, 7: 1.66, 8: 1.75, 9: 1.77})
    ctl = AdaptiveK(curve, k_max=8)
    for _ in range(10):
        ctl.observe(it(2, 0))
    low = ctl.next_k()
    for _ in range(8):
        ctl.observe(it(8, 8))
    high = ctl.next_k()
    assert low <= 1 < high


def test_adaptive_uses_the_verify_cost_curve():
    """Same acceptance, a verification cost that jumps after 3 tokens: k stops at 2, where a flat curve goes deeper."""
    steep = CostCurve(c=0.05, v={1: 1.0, 2: 1.0, 3: 1.0, 4: 3.0, 5: 3.0, 6: 3.0, 7: 3.0, 8: 3.0, 9: 3.0})
    a, b = AdaptiveK(steep), AdaptiveK(FLAT_CHEAP)
    for ctl in (a, b):
        for _ in range(10):
            ctl.observe(it(8, 5))
    assert a.next_k() == 2 and b.next_k() > 2


def test_heuristic_is_transformers_schedule():
    h = HeuristicK(start=3, k_max=6)
    h.observe(it(3, 3))
    assert h.next_k() == 5
    h.observe(it(5, 5))
    assert h.next_k() == 6  # capped
    h.observe(it(6, 2))
    assert h.next_k() == 5
    for _ in range(10):
        h.observe(it(h.next_k(), 0))
    assert h.next_k() == 1


def test_parse_and_make_controller():
    assert parse_k("4") == 4 and parse_k(" Adaptive ") == "adaptive" and parse_k("heuristic") == "heuristic"
    for bad in ("0", "17", "four", "", "2.5"):
        with pytest.raises(PlaygroundError):
            parse_k(bad)
    assert isinstance(make_controller(3), FixedK)
    assert isinstance(make_controller("heuristic"), HeuristicK)
    with pytest.raises(PlaygroundError, match="calibration"):
        make_controller("adaptive")
    assert isinstance(make_controller("adaptive", FLAT_CHEAP), AdaptiveK)
    with pytest.raises(PlaygroundError):
        AdaptiveK(FLAT_CHEAP, settings=AdaptiveSettings(decay=0))
    with pytest.raises(PlaygroundError):
        CostCurve(c=-1, v={1: 1.0})


def controllers():
    curve = CostCurve(c=0.25, v={n: 1.0 + 0.05 * (n - 1) for n in range(1, 10)})
    return {"adaptive": lambda: AdaptiveK(curve, k_max=6), "heuristic": lambda: HeuristicK(start=2, k_max=8)}


@pytest.mark.parametrize("name", ["adaptive", "heuristic"])
@pytest.mark.parametrize("drafter", ["draft", "lookup", "hybrid"])
def test_greedy_equals_plain_with_a_varying_k(target64, drafts64, name, drafter):
    pair = tiny_pair(target64, drafts64["useful"])
    for prompt in PROMPTS:
        for n in (1, 7, 24):
            proposer = {"draft": lambda: DraftModelProposer(pair.draft, "cpu", None),
                        "lookup": lambda: PromptLookupProposer(),
                        "hybrid": lambda: HybridProposer(DraftModelProposer(pair.draft, "cpu", None))}[drafter]()
            recs = list(speculative_generate(pair, prompt, proposer=proposer, k=controllers()[name](),
                                             max_new_tokens=n))
            spec = [t for r in recs if isinstance(r, Iteration) for t in r.emitted]
            plain = [r.token for r in plain_generate(pair, prompt, max_new_tokens=n) if isinstance(r, Step)]
            assert spec == plain, (name, drafter, prompt, n)


def test_adaptive_k_values_are_in_the_records(pair64):
    ctl = controllers()["adaptive"]()
    recs = list(speculative_generate(pair64, list(range(20, 45)), proposer=DraftModelProposer(pair64.draft, "cpu", None),
                                     k=ctl, max_new_tokens=40))
    its = [r for r in recs if isinstance(r, Iteration)]
    # every iteration used what the controller chose (clipped only by the tokens still wanted)
    assert [x.k for x in its[:-1]] == ctl.decisions[: len(its) - 1]
    assert sum(summarize(recs).k_values.values()) == len(its)


def test_hybrid_says_where_each_proposal_came_from(pair64):
    prompt = [10, 11, 12, 13, 10, 11, 12, 13, 10, 11]  # "12 13" follows "10 11" earlier: lookup finds it
    hybrid = HybridProposer(DraftModelProposer(pair64.draft, "cpu", None), min_ngram=2)
    recs = list(speculative_generate(pair64, prompt, proposer=hybrid, k=3, max_new_tokens=20))
    its = [r for r in recs if isinstance(r, Iteration) and r.proposed]
    assert its[0].sources == ("lookup",) * len(its[0].proposed) and its[0].proposed[:2] == (12, 13)
    assert all(s in ("lookup", "draft") for x in its for s in x.sources)
    assert all(len(x.sources) == len(x.proposed) for x in its)


@pytest.fixture(scope="module")
def pair8():
    target = tiny_model(vocab=8, seed=10, layers=1, hidden=16, scale=0.6)
    draft = tiny_model(vocab=8, seed=11, layers=1, hidden=16, scale=0.6)
    return tiny_pair(target, draft)


def varying_k_counts(pair, prompt, name, rule, seeds, ks_seen):
    counts = np.zeros((8, 8, 8), dtype=np.int64)
    for seed in seeds:
        recs = list(speculative_generate(pair, prompt, proposer=DraftModelProposer(pair.draft, "cpu", None),
                                         k=controllers()[name](), sampling=SamplingConfig(do_sample=True, seed=seed),
                                         max_new_tokens=3, options=LoopOptions(rule=rule)))
        toks = [t for r in recs if isinstance(r, Iteration) for t in r.emitted]
        ks_seen.update(r.k for r in recs if isinstance(r, Iteration))
        counts[toks[0], toks[1], toks[2]] += 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("name, rule", [("adaptive", accept_sample), ("heuristic", accept_sample),
                                        ("adaptive", accept_resample_target)],
                         ids=["adaptive", "heuristic", "adaptive, resample-target (wrong)"])
def test_sampling_with_a_varying_k_keeps_the_targets_distribution(pair8, name, rule):
    """Three tokens, so k changes between iterations in response to what was accepted. The same harness with the
    wrong resample-from-target rule is caught within the 6,000 runs (it stops once caught: test_engine.first_catch;
    measured, these seeds: after the first 1,500, p = 1.2e-12)."""
    prompt = [1, 5, 2]
    probs = exact_joint(pair8.target, prompt, SamplingConfig(do_sample=True), n=3)
    ks_seen = set()
    if rule is accept_sample:
        pvalue = chi2(varying_k_counts(pair8, prompt, name, rule, range(6000), ks_seen), probs)
        assert len(ks_seen) >= 2  # k really varied
        assert pvalue > 0.001
    else:
        pvalue, used = first_catch(lambda seeds: varying_k_counts(pair8, prompt, name, rule, seeds, ks_seen),
                                   lambda counts: chi2(counts, probs), 6000, alpha=1e-4)
        print(f"caught after {used} runs: p = {pvalue:.2g}")
        assert len(ks_seen) >= 2 and pvalue < 1e-4 / 4


def test_speed_and_sweep_run_adaptive_and_heuristic_arms(pair64):
    def factory():
        return DraftModelProposer(pair64.draft, pair64.device, pair64.vocab_size)

    timing = lab.calibrate(pair64, [1, 2, 3, 4, 5, 6], factory(), lab.CalibrationPlan(n_max=5, repeats=2, warmup=1))
    res = speed(SpeedRequest(pair64, {"a": [1, 2, 3], "b": [4, 5, 6]}, factory,
                             ks=(1, 2, "adaptive", "heuristic"), rounds=2, max_new_tokens=10,
                             timing={"a": timing, "b": timing}))  # one calibration per prompt
    assert set(res.timing_by_prompt) == {"a", "b"}
    rows = {r.k: r for r in res.table}
    assert set(rows) == {1, 2, "adaptive", "heuristic"}
    assert res.best_k in (1, 2)  # a fixed k, never the name of a schedule
    assert sum(rows["adaptive"].k_values.values()) > 0
    assert rows[2].predicted_empirical is not None and rows[2].miss_empirical is not None
    assert {(r.prompt, r.k) for r in res.by_prompt} == {(p, k) for p in "ab" for k in rows}
    assert set(res.best_k_by_prompt) == {"a", "b"}
    sw = sweep(SpeedRequest(pair64, {"prompt": [1, 2, 3]}, factory, ks=(1, 2, 3), rounds=1, max_new_tokens=8,
                            timing=timing))
    assert [r.k for r in sw.table] == [1, 2, 3, "adaptive"]
    assert all(r.break_even_alpha is None or 0 < r.break_even_alpha <= 1 for r in sw.table if isinstance(r.k, int))
    assert sw.predicted_best_k in range(4)


def test_the_token_view_marks_what_prompt_lookup_copied():
    from playground.ui import render

    hybrid = Iteration(index=0, k=3, proposed=(4, 5, 6), n_accepted=2, emitted=(4, 5, 9),
                       roles=("accepted", "accepted", "correction"), draft_s=0, verify_s=0, rollback_s=0,
                       elapsed_s=0, sources=("lookup", "lookup", "lookup"))
    model = Iteration(index=1, k=2, proposed=(7, 8), n_accepted=2, emitted=(7, 8, 1),
                      roles=("accepted", "accepted", "bonus"), draft_s=0, verify_s=0, rollback_s=0,
                      elapsed_s=0, sources=("draft", "draft"))
    out = render.records_html([hybrid, model])
    assert out.count('class="tok acc lk"') == 2  # the two copied tokens kept; the model's are plain green
    assert out.count('class="tok acc"') == 2
    assert "copied by prompt lookup" in out and "guessed by the draft model" in out
    assert "copied by lookup" in render.legend_html()


def test_the_ui_runs_adaptive_and_heuristic_k_and_shows_the_choices():
    """Through the handler the browser calls: adaptive k calibrates once (kept on the pair), every
    iteration's k is in the record, the status says which k were chosen, and greedy output is unchanged."""
    from playground.pairs.models import ModelPair
    from playground.ui import run_panel
    from tests.test_ui_handlers import WORDS, request
    from tests.tiny import perturbed, word_tokenizer

    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    pair = ModelPair(target=target, tokenizer=word_tokenizer(WORDS), draft=perturbed(target, noise=0.015),
                     eos_ids=frozenset({63}), target_name="tiny-target", draft_name="tiny-draft")
    provider = run_panel.PairProvider(pair=pair)
    outs = {}
    for mode in ("fixed", "adaptive", "heuristic"):
        views = list(run_panel.stream_run(provider, None, request(provider, max_new_tokens=20, k_mode=mode)))
        final = views[-1]
        run = final.session.run
        assert run.finished and final.doc["config"]["k_mode"] == mode
        outs[mode] = [t for r in run.records if isinstance(r, Iteration) for t in r.emitted]
        if mode != "fixed":
            assert f"k = {mode} (chosen: " in final.status
            assert "k was chosen per iteration" in final.prediction
    assert outs["adaptive"] == outs["fixed"] == outs["heuristic"]
    assert len(provider.calibrations) == 1  # calibrated once, kept for the pair
    with pytest.raises(PlaygroundError, match="k per iteration"):
        list(run_panel.stream_run(provider, None, request(provider, max_new_tokens=20, k_mode="random")))


def test_schedules_carry_their_state_from_run_to_run_when_given_a_memory(pair64):
    memory: dict = {}
    first = AdaptiveK(FLAT_CHEAP, k_max=8, memory=memory)
    for _ in range(6):
        first.observe(it(8, 8))
    second = AdaptiveK(FLAT_CHEAP, k_max=8, memory=memory)
    assert second.next_k() == 8 and all(a > 0.95 for a in second.estimates())
    fresh = AdaptiveK(FLAT_CHEAP, k_max=8).alpha()
    assert fresh == pytest.approx(0.9) and second.alpha() > fresh  # without memory: the prior
    # The last run's acceptance is the next run's prior, with the prior's weight: a run that rejected
    # everything starts the next at k = 0, and a new text that is accepted moves it back within a few iterations.
    costly = CostCurve(c=0.7, v={n: 1.0 for n in range(1, 18)})
    memory = {}
    rejecting = AdaptiveK(costly, k_max=8, memory=memory)
    for _ in range(30):
        rejecting.observe(it(2, 0))
    assert memory["adaptive"][None] < 0.2  # 10 decayed rejections against the prior (0.9, weight 2)
    assert AdaptiveK(costly, k_max=8).next_k() > 0  # fresh: the prior (0.9) says drafting pays
    after = AdaptiveK(costly, k_max=8, memory=memory, settings=AdaptiveSettings(optimism=0))
    assert after.next_k() == 0 and after.alpha() == pytest.approx(memory["adaptive"][None])
    for _ in range(3):
        after.observe(it(1, 1))
    assert after.next_k() > 0
    h_memory: dict = {}
    h = HeuristicK(start=3, memory=h_memory)
    h.observe(it(3, 3))
    assert HeuristicK(start=3, memory=h_memory).next_k() == 5 and HeuristicK(start=3).next_k() == 3


def test_a_verdict_of_plain_steps_is_probed_every_probe_every_steps():
    ctl = AdaptiveK(CostCurve(c=0.6, v={n: 1.0 + 0.1 * (n - 1) for n in range(1, 18)}), k_max=8,
                    settings=AdaptiveSettings(probe_every=4))
    for _ in range(10):
        ctl.observe(it(2, 0))
    ks = run_rejected(ctl, 40)
    probes = [i for i, k in enumerate(ks) if k]
    assert probes[0] == 4 and {b - a - 1 for a, b in itertools.pairwise(probes)} == {4}  # 4 plain steps each time
    assert {ks[i] for i in probes} == {ctl._probe_k(None)}  # at the probe k
    # as soon as drafting pays again the controller drafts without waiting for a probe
    for _ in range(20):
        ctl.observe(it(1, 1))
    assert ctl.next_k() > 0


def test_each_proposal_source_has_its_own_cost_and_acceptance():
    """The hybrid's lookup is free and here always right, its model drafter costly and here often
    wrong: k is deep for a lookup and plain for the model, from one controller."""
    curve = CostCurve(c=0.6, v={n: 1.0 + 0.05 * (n - 1) for n in range(1, 18)}, overhead=0.1,
                      sources={"lookup": (0.0, 0.01)})
    ctl = AdaptiveK(curve)
    for _ in range(10):
        ctl.observe(Iteration(0, 16, tuple(range(16)), 16, tuple(range(17)), ("accepted",) * 16 + ("bonus",),
                              0, 0, 0, 0, sources=("lookup",) * 16))
        ctl.observe(Iteration(0, 2, (1, 2), 0, (3,), ("correction",), 0, 0, 0, 0, sources=("draft",) * 2))
    assert ctl.next_k(source="lookup") == 16
    assert ctl.next_k(source="draft") == 0
    assert ctl.estimates("lookup")[0] > 0.9 and ctl.estimates("draft")[0] < 0.3
    assert curve.for_source("draft") == (0.6, 0.1) and curve.for_source(None) == (0.6, 0.1)
    with pytest.raises(PlaygroundError, match="lookup"):
        CostCurve(c=0.5, v={1: 1.0}, sources={"lookup": (-1.0, 0.0)})


def test_near_the_length_limit_k_is_what_the_tokens_left_can_use():
    """Everything accepted, a cheap draft: the steady choice is 16, and near the end k is clipped so that one pass
    (the proposals and the bonus) emits at most the tokens left; with one left, a plain step."""
    v = {n: 1.0 + 0.1 * (n - 1) for n in range(1, 18)}
    ctl = AdaptiveK(CostCurve(c=0.05, v=v))
    for _ in range(10):
        ctl.observe(it(16, 16))
    assert ctl.next_k() == 16 and ctl.next_k(remaining=500) == 16
    assert ctl.next_k(remaining=10) == 9 and ctl.next_k(remaining=20) == 16
    assert ctl.next_k(remaining=1) == 0


def test_the_engine_tells_the_controller_what_is_left_and_where_the_next_proposal_comes_from(pair64):
    class Recording(FixedK):
        def __init__(self):
            super().__init__(3)
            self.calls = []

        def next_k(self, remaining=None, source=None):
            self.calls.append((remaining, source))
            return 3

    prompt = [10, 11, 12, 13, 10, 11, 12, 13, 10, 11]
    ctl = Recording()
    recs = list(speculative_generate(pair64, prompt, proposer=HybridProposer(DraftModelProposer(pair64.draft, "cpu", None)),
                                     k=ctl, max_new_tokens=12))
    its = [r for r in recs if isinstance(r, Iteration)]
    assert ctl.calls[0] == (12, "lookup")  # "10 11" occurred before
    left = 12
    for (remaining, source), x in zip(ctl.calls, its):
        assert remaining == left
        if x.proposed and remaining > 1:
            assert x.sources[0] == source  # the hint was what propose then did
        left -= len(x.emitted)
    assert summarize(recs).source_iterations.get("lookup", 0) >= 1


def test_calibrating_a_hybrid_times_its_sources_apart(pair64):
    hybrid = HybridProposer(DraftModelProposer(pair64.draft, "cpu", None))
    timing = lab.calibrate(pair64, [1, 2, 3, 4, 1, 2, 3], hybrid,
                           lab.CalibrationPlan(n_max=5, repeats=2, warmup=1))
    costs = timing.source_costs
    assert set(costs) == {"lookup", "draft"}
    assert costs["lookup"][0] == 0.0 and costs["lookup"][1] < costs["draft"][0] + costs["draft"][1]
    assert costs["draft"] == (timing.c, timing.overhead) and timing.c > 0.05  # the model, not lookup
    assert CostCurve.from_timing(timing).for_source("lookup") == costs["lookup"]
    # a hybrid run's prediction mixes the sources' costs by how often each proposed
    only_draft = timing.predict([0.9], 4, source_iterations={"draft": 5})
    only_lookup = timing.predict([0.9], 4, source_iterations={"lookup": 5})
    mixed = timing.predict([0.9], 4, source_iterations={"draft": 5, "lookup": 5})
    assert only_draft < mixed < only_lookup
    assert "lookup" in timing.to_dict()["source_costs"]


def test_optimism_tests_a_verdict_of_k_0_reached_on_few_observations():
    """Near break-even on two observations, one standard error of optimism drafts (at no more than a
    probe's k) where the bare estimate would not; thirty rejections are no longer a matter of hope."""
    curve = CostCurve(c=0.6, v={n: 1.0 + 0.1 * (n - 1) for n in range(1, 18)}, overhead=0.1)
    hopeful = AdaptiveK(curve, settings=AdaptiveSettings(optimism=1.0))
    bare = AdaptiveK(curve, settings=AdaptiveSettings(optimism=0.0))
    for ctl in (hopeful, bare):
        ctl.observe(it(2, 1))
        ctl.observe(it(2, 1))
    assert bare.next_k() == 0
    k = hopeful.next_k()
    assert 0 < k <= hopeful._probe_k(None)
    sure = AdaptiveK(curve, settings=AdaptiveSettings(optimism=1.0))
    for _ in range(30):
        sure.observe(it(2, 0))
    assert sure.next_k() == 0
    with pytest.raises(PlaygroundError, match="optimism"):
        AdaptiveK(curve, settings=AdaptiveSettings(optimism=-1))


DEFAULTS = {"decay": 0.9, "prior": 0.9, "prior_weight": 2.0, "position_weight": 4.0, "probe_every": 4,
            "optimism": 1.0, "confidence": True}


def test_the_settings_defaults():
    """`confidence` is on (test_adaptive_confidence.py); it acts only when the loop says the drafter stops on its
    confidence, which the script here never does."""
    defaults = AdaptiveSettings()
    assert dataclasses.asdict(defaults) == DEFAULTS
    assert all(type(getattr(defaults, name)) is type(value) for name, value in DEFAULTS.items())
    ctl = AdaptiveK(FLAT_CHEAP)
    assert ctl.settings == defaults and ctl.k_max == K_MAX == 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        defaults.decay = 0.5  # type: ignore[misc]
    for bad in ({"prior": 1.5}, {"probe_every": 0}, {"decay": 0.0}, {"optimism": -1.0}):
        with pytest.raises(PlaygroundError):
            AdaptiveSettings(**bad)


# A draft with a per-token cost and a verification cost rising in n, plus a free lookup source.
SCRIPT_CURVE = CostCurve(c=0.3, v={n: 1.0 + 0.06 * (n - 1) for n in range(1, 18)}, overhead=0.05,
                         sources={"lookup": (0.0, 0.01)})
# (iterations, source, proposals accepted per iteration, at most k): acceptance, rejections (k = 0, optimism and
# probes), partial acceptance, a free source drafting deep, a long rejection (probes every probe_every plain
# steps), acceptance again; then the finish (k clipped to the tokens left).
SCRIPT = [(4, None, K_MAX), (12, None, 0), (10, None, K_MAX), (6, None, 1), (8, "lookup", K_MAX), (5, None, 2),
          (70, None, 0), (3, "lookup", 3), (30, None, K_MAX)]


def scripted_choices(ctl, phases=SCRIPT, finish=60):
    """The k `ctl` chooses through `phases`, then through a finish of `finish` tokens with every proposal
    accepted (the remaining count passed), as a string of ints."""
    ks = []
    for n, source, accepted in phases:
        for _ in range(n):
            k = ctl.next_k(source=source)
            ks.append(k)
            ctl.observe(it(k, min(k, accepted), source=source) if k else PLAIN_STEP)
    left = finish
    while left > 0:
        k = ctl.next_k(remaining=left)
        ks.append(k)
        step = it(k, k) if k else PLAIN_STEP
        ctl.observe(step)
        left -= len(step.emitted)
    return " ".join(map(str, ks))


# Recorded from AdaptiveK on SCRIPT_CURVE (rules: steady choice, optimism, probes, stop rule): two runs sharing one
# memory (the second starts from the first's acceptance), and the memory after them.
GOLDEN_DEFAULT = (
    ('10 16 16 16 16 15 9 7 5 4 3 2 1 4 4 3 2 4 2 2 3 3 4 4 5 6 7 5 4 3 3 2 16 16 16 16 16 16 16 16 1 2 2 3 2 2 2 2 2 2 '
     '1 1 1 1 2 1 1 1 1 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 '
     '0 4 0 0 0 0 4 0 16 16 16 0 0 0 0 4 0 0 0 0 4 2 3 2 2 2 3 3 4 4 5 5 6 7 8 9 10 12 13 15 16 16 16 16 8'),
    ('16 16 16 16 16 16 10 7 5 4 3 2 2 4 4 4 3 4 2 3 3 4 4 5 5 6 7 6 5 4 3 2 16 16 16 16 16 16 16 16 1 2 2 3 2 2 2 2 2 '
     '2 1 1 1 1 1 1 1 1 1 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 0 0 4 0 0 '
     '0 0 4 0 0 0 0 4 0 16 16 16 0 0 0 0 4 0 0 0 0 4 2 3 2 2 2 3 3 4 4 5 5 6 7 8 9 11 12 14 16 16 16 16 16 8'),
    {"adaptive": {None: 0.9939114096339201, "lookup": 0.9648869814729302},
     "adaptive_evidence": {None: 102.50877433637375, "lookup": 77.2703046256}},
)
GOLDEN_OTHER = (
    ('2 4 6 8 10 6 4 2 1 2 0 0 2 0 0 2 0 0 2 2 2 2 3 4 5 6 7 5 3 2 1 1 12 16 16 16 16 16 16 16 1 2 3 2 2 2 2 2 2 1 1 0 '
     '0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 '
     '0 2 0 0 2 0 16 16 16 0 0 2 0 0 2 1 2 2 3 4 5 6 7 8 10 11 13 15 16 16 16 16 16 16 16 16 16 16 16 16 16 16 8'),
    ('16 16 16 16 16 16 9 5 3 2 2 2 0 0 2 0 0 2 1 2 3 4 5 7 9 12 16 9 5 3 1 2 16 16 16 16 16 16 16 16 1 1 2 3 2 2 2 2 2 '
     '1 1 1 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 0 0 2 '
     '0 0 2 0 0 2 0 0 2 16 16 16 0 0 2 0 0 2 2 2 3 4 5 7 9 12 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 16 '
     '8'),
    {"adaptive": {None: 0.9994224764434381, "lookup": 0.9433090209799533},
     "adaptive_evidence": {None: 71.43446143773023, "lookup": 43.84805232640001}},
)
OTHER_SETTINGS = {"decay": 0.8, "prior": 0.7, "prior_weight": 3.0, "position_weight": 2.0, "probe_every": 2,
                  "optimism": 0.5}


@pytest.mark.parametrize("settings, golden", [(AdaptiveSettings(), GOLDEN_DEFAULT),
                                              (AdaptiveSettings(**OTHER_SETTINGS), GOLDEN_OTHER)],
                         ids=["default-settings", "other-settings"])
def test_settings_choose_exactly_as_recorded(settings, golden):
    memory: dict = {}

    def make():
        return AdaptiveK(SCRIPT_CURVE, settings=settings, memory=memory)

    first, second, remembered = golden
    assert scripted_choices(make()) == first
    assert scripted_choices(make()) == second
    for key, value in remembered.items():
        assert memory[key] == pytest.approx(value, rel=1e-12), key


def test_the_script_starts_deep_and_ends_its_long_rejection_in_plain_steps_with_probes():
    """The first call starts deep (the prior's rate is uncertain, so its deep products are high), and the 70
    rejected iterations fall to plain steps within 15, then only probes (at the probe k, 4) break them, one after
    every 4 plain steps."""
    first = scripted_choices(AdaptiveK(SCRIPT_CURVE)).split()
    assert int(first[0]) > 4
    rejected = first[45:115]
    tail = rejected[15:]
    assert set(tail) <= {"0", "4"} and "0 0 0 0 4 0 0 0 0 4" in " ".join(tail)


def test_no_settings_and_default_settings_agree_at_every_step():
    a, b = AdaptiveK(SCRIPT_CURVE), AdaptiveK(SCRIPT_CURVE, settings=AdaptiveSettings())
    assert scripted_choices(a) == scripted_choices(b)
    assert a.decisions == b.decisions and a.counts == b.counts and a.plain_run == b.plain_run
    assert all(a.estimates(s) == b.estimates(s) for s in (None, "lookup"))

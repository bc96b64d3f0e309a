"""Adaptive k's stop rule: open to k_max and let the drafter's own confidence say when drafting on stops paying
(AdaptiveK.drafting_rule, cost.drafts_on), learning what the drafter's sureness means from its proposals."""

import argparse
import importlib.util
from pathlib import Path

import pytest
import torch

from playground.core.engine import K_MAX, plain_generate, speculative_generate
from playground.core.proposal import RunContext, top_two
from playground.core.records import Iteration, Step, describe_choices, summarize
from playground.core.sampling import SamplingConfig
from playground.drafters.adaptive import AdaptiveK, AdaptiveSettings, CostCurve
from playground.drafters.confidence import BINS, MEMORY_KEY, TIE, ConfidenceBins, confidence_bin, prior, sureness
from playground.drafters.proposers import DraftModelProposer, HybridProposer, PromptLookupProposer
from playground.ui import markup
from tests.test_adaptive import GOLDEN_DEFAULT, PLAIN_STEP, SCRIPT_CURVE, it, scripted_choices
from tests.test_ui_confidence import request

# a draft at 0.3 of a target step and passes dearer with their length: the steady choice is well below 16
CURVE = CostCurve(c=0.3, v={n: 1.0 + 0.06 * (n - 1) for n in range(1, 18)})


def sure(s):
    """A proposal's probability and its runner-up's, as the rule is called with them, for a margin sureness of s."""
    return 0.5, 0.5 * (1.0 - s)


def drafted_under(rule, qs):
    """How many proposals a drafter whose sureness of each is `qs` (margins; or (probability, runner-up) pairs)
    drafts under `rule` (it drafts one, then asks)."""
    for j, q in enumerate(qs, start=1):
        if not rule(*(q if isinstance(q, tuple) else sure(q))):
            return j
    return len(qs)


def run(ctl, qs, accepted, n=12):
    """n iterations of a drafter whose successive proposals have sureness `qs`, the first `accepted` of those
    it drafts accepted; the proposals drafted in each."""
    out = []
    for _ in range(n):
        k = ctl.next_k()
        rule = ctl.drafting_rule()
        m = drafted_under(rule, qs[:k]) if rule is not None else k
        out.append(m)
        ctl.observe(it(k, min(m, accepted), proposed=tuple(range(m))))
    return out


def test_without_a_drafter_that_stops_the_choice_is_unchanged():
    on, off = AdaptiveK(CURVE), AdaptiveK(CURVE, settings=AdaptiveSettings(confidence=False))
    assert on.next_k() == off.next_k() < K_MAX
    assert on.drafting_rule() is None
    told = AdaptiveK(CURVE, settings=AdaptiveSettings(confidence=False))
    told.drafter_stops(True)
    assert told.next_k() == off.next_k() and told.drafting_rule() is None  # the setting turns it off


def test_with_nothing_learnt_the_rule_drafts_the_steady_choice_unless_the_drafter_is_surer():
    """Before any proposal was judged a probability under the position's estimate means that estimate, and
    drafting on pays up to the steady choice's k, no further (renewal reward: the steps are worth its speed-up);
    a drafter surer than the estimates is taken at its word (its probability is a floor) and drafts deeper."""
    ctl = AdaptiveK(CURVE)
    ctl.drafter_stops(True)
    steady = ctl.choice().k
    assert 1 < steady < K_MAX
    assert ctl.next_k() == K_MAX  # open: the rule stops the drafter
    assert drafted_under(ctl.drafting_rule(), [0.2] * K_MAX) == steady
    ctl.next_k()
    assert drafted_under(ctl.drafting_rule(), [0.99] * K_MAX) == K_MAX
    # near the end the cap is the tokens left, and the rule still stops the drafter within it
    assert ctl.next_k(remaining=5) == 4 and ctl.drafting_rule() is not None
    assert ctl.next_k(remaining=1) == 0


def test_it_learns_that_an_unsure_drafter_is_accepted_and_drafts_deep():
    """A drafter that gives its proposals 0.4 and has every one accepted (as an int8 copy of the target, whose
    arg-max survives a flat distribution): the rule learns that 0.4 means acceptance and drafts to k_max."""
    ctl = AdaptiveK(CURVE)
    ctl.drafter_stops(True)
    drafted = run(ctl, [0.4] * K_MAX, accepted=K_MAX)
    assert drafted[-1] == K_MAX and drafted[0] < K_MAX


def test_it_learns_where_a_drafter_is_rejected_and_stops_there():
    """Proposals at 0.99 accepted, one at 0.4 rejected, at a position that moves from iteration to iteration:
    after a few iterations the drafter never drafts past a 0.4 and mostly stops right after it (the position
    estimates alone cannot say where the rejection comes)."""
    ctl = AdaptiveK(CURVE)
    ctl.drafter_stops(True)
    out = []
    for i in range(20):
        at = 2 + i % 5  # the 0.4 proposal's index
        k = ctl.next_k()
        m = drafted_under(ctl.drafting_rule(), ([0.99] * at + [0.4] + [0.99] * K_MAX)[:k])
        out.append((at + 1, m))
        ctl.observe(it(k, min(m, at), proposed=tuple(range(m))))
    assert all(m <= stop for stop, m in out[10:])
    assert sum(m == stop for stop, m in out[10:]) >= 7
    accept = ctl.by_confidence.accepted_given(None, ctl.estimates(), ctl.settings.position_weight)
    assert accept(0.4, 3) < 0.3 and accept(0.99, 3) > 0.95


def test_one_rejection_deep_in_an_iteration_does_not_stop_the_next_ones_there():
    """A sure drafter (0.99 on every proposal) has its ninth proposal rejected once, then all accepted. The rule
    looks ahead on the pooled rate, not on the ninth position's own estimate (which that one rejection pulled
    below alpha): a model drafter's acceptance depends on the token, not on its position (drafting_rule's docstring
    has the measurement), so the next iterations draft past the ninth within a few iterations (looking ahead on the
    position estimates they stopped at seven or eight for five iterations)."""
    ctl = AdaptiveK(CostCurve(c=0.2, v={n: 1.0 + 0.03 * (n - 1) for n in range(1, 18)}))
    ctl.drafter_stops(True)
    drafted = []
    for i in range(10):
        k = ctl.next_k()
        m = drafted_under(ctl.drafting_rule(), [0.99] * k)
        drafted.append(m)
        ctl.observe(it(k, min(m, 8) if i == 0 else m, proposed=tuple(range(m))))
    assert drafted[0] == K_MAX and drafted[1] < 9  # the rejection is learnt: the bin's rate fell
    assert max(drafted[1:6]) > 9 and drafted[-1] == K_MAX


def test_what_it_learnt_carries_over_in_the_memory():
    memory: dict = {}
    first = AdaptiveK(CURVE, memory=memory)
    first.drafter_stops(True)
    run(first, [0.4] * K_MAX, accepted=K_MAX)
    reached = memory[MEMORY_KEY][None][0]
    assert reached[confidence_bin(0.4)] > 0 and sum(reached) == reached[confidence_bin(0.4)]  # the 0.3-0.5 bin
    second = AdaptiveK(CURVE, memory=memory)
    second.drafter_stops(True)
    fresh = AdaptiveK(CURVE)
    fresh.drafter_stops(True)
    second.next_k(), fresh.next_k()
    assert drafted_under(second.drafting_rule(), [0.4] * K_MAX) > drafted_under(fresh.drafting_rule(), [0.4] * K_MAX)


def test_a_near_tie_is_a_coin_flip_before_anything_is_learnt_and_stops_the_drafter_there():
    """Under margin TIE the prior rises from 0.5 at a tie to the position's rate at TIE (never above it), where
    elsewhere the sureness is a floor; a drafter sure of every proposal but one near-tie stops right after it."""
    assert prior(0.0, 0.95) == 0.5 and prior(TIE / 2, 0.95) == pytest.approx(0.75) and prior(TIE, 0.95) == 0.95
    assert prior(TIE * 0.99, 0.95) == 0.95 and prior(0.05, 0.6) == 0.6 and prior(0.99, 0.95) == 0.99
    ctl = AdaptiveK(CURVE)
    ctl.drafter_stops(True)
    ctl.next_k()
    assert drafted_under(ctl.drafting_rule(), [0.99] * 5 + [0.01] + [0.99] * K_MAX) == 6
    ctl.next_k()
    assert drafted_under(ctl.drafting_rule(), [0.99] * 5 + [0.15] + [0.99] * K_MAX) == K_MAX


def test_a_rejected_near_tie_does_not_lower_the_rate_of_clearer_unsure_proposals():
    """The ReAct case (docs/results.md, 2026-12-04): proposals at margins 0.15-0.3 all accepted, one at 0.02
    rejected. The near-tie has its own bin, so a later draft through 0.15-0.3 proposals is not stopped by it; with one
    bin for 0-0.3, as before, that one rejection took the 0.1-0.3 proposals' rate under the rest's."""
    bins = ConfidenceBins()
    bins.learn(None, [0.99, 0.29, 0.17, 0.3, 0.99, 0.02, 0.9], n_evaluated=6, n_accepted=5)
    accept = bins.accepted_given(None, [0.95] * K_MAX, 4.0)
    assert accept(0.2, 0) == pytest.approx((2 + 0.95 * 4) / (2 + 4))  # 0.29 and 0.17 accepted: above the prior
    assert accept(0.02, 0) == pytest.approx((0 + prior(0.02, 0.95) * 4) / (1 + 4))  # the rejection lands here
    mixed = (2 + 0.95 * 4) / (3 + 4)  # what a single 0-0.3 bin would have said of the 0.2 proposal
    assert accept(0.2, 0) > 0.95 > mixed


def test_counts_kept_under_other_bins_are_not_read():
    memory = {MEMORY_KEY: {None: [[1.0] * (BINS - 1), [0.0] * (BINS - 1)]}}
    bins = ConfidenceBins(memory)
    assert bins.counts == {}
    assert bins.accepted_given(None, [0.9] * K_MAX, 4.0)(0.6, 0) == 0.9
    bins.learn(None, [0.6], 1, 1)
    assert len(memory[MEMORY_KEY][None][0]) == BINS


def test_a_flat_proposal_without_a_near_tie_is_sure_where_its_probability_is_not():
    """What a greedy target doubts is a near-tie between the draft's first and second choices: before anything is
    learnt, proposals at probability 0.2 with nothing else above 0.002 draft as deep as sure ones, where the same 0.2
    with a runner-up at 0.18 stops at the steady choice."""
    ctl = AdaptiveK(CURVE)
    ctl.drafter_stops(True)
    steady = ctl.choice().k
    ctl.next_k()
    assert drafted_under(ctl.drafting_rule(), [(0.2, 0.002)] * K_MAX) == K_MAX
    ctl.next_k()
    assert drafted_under(ctl.drafting_rule(), [(0.2, 0.18)] * K_MAX) == steady


def test_sureness_and_the_runner_up_the_loop_reads():
    assert sureness(0.5, 0.5) == 0.0 and sureness(0.4, 0.0) == 1.0 and sureness(0.4, 0.1) == pytest.approx(0.75)
    assert sureness(0.0, 0.3) == 0.0 and sureness(0.1, 0.3) == 0.0  # a token below another (sampling): not sure
    probs = torch.tensor([0.1, 0.6, 0.3])
    assert top_two(probs, 1) == pytest.approx((0.6, 0.3)) and top_two(probs, 2) == pytest.approx((0.3, 0.6))
    heard = []
    ctx = RunContext(SamplingConfig(), torch.Generator(), frozenset(), go_on=lambda q, r: heard.append((q, r)) or True)
    assert ctx.confident(probs, 1) and heard == [(pytest.approx(0.6), pytest.approx(0.3))]


def test_the_loop_tells_the_controller_whether_the_drafter_stops(pair64):
    prompt = list(range(20, 45))
    cases = [(DraftModelProposer(pair64.draft, "cpu", None), None, True),
             (HybridProposer(DraftModelProposer(pair64.draft, "cpu", None)), None, True),
             (PromptLookupProposer(), None, False),
             (DraftModelProposer(pair64.draft, "cpu", None), SamplingConfig(do_sample=True, temperature=0.8, seed=1), False)]
    for proposer, sampling, stops in cases:
        ctl = AdaptiveK(CostCurve(c=0.25, v={n: 1.0 + 0.05 * (n - 1) for n in range(1, 18)}))
        kwargs = {"sampling": sampling} if sampling is not None else {}
        recs = [r for r in speculative_generate(pair64, prompt, proposer=proposer, k=ctl, max_new_tokens=40, **kwargs)
                if isinstance(r, Iteration)]
        assert ctl.stops is stops, proposer.name
        assert all(len(r.proposed) <= r.k for r in recs)
        if stops:  # opened to k_max (or what the length leaves), the drafter stopped short of it on its own
            assert any(r.k == min(K_MAX, 40 - sum(len(x.emitted) for x in recs[:i]) - 1) and 0 < len(r.proposed) < r.k
                       for i, r in enumerate(recs))
            plain = [r.token for r in plain_generate(pair64, prompt, max_new_tokens=40) if isinstance(r, Step)]
            assert [t for r in recs for t in r.emitted] == plain



def test_a_run_says_how_many_proposals_it_drafted_under_its_caps(pair64):
    ctl = AdaptiveK(CostCurve(c=0.25, v={n: 1.0 + 0.05 * (n - 1) for n in range(1, 18)}))
    recs = list(speculative_generate(pair64, list(range(20, 45)), proposer=DraftModelProposer(pair64.draft, "cpu", None),
                                     k=ctl, max_new_tokens=40))
    s = summarize(recs)
    its = [r for r in recs if isinstance(r, Iteration)]
    assert sum(s.drafted_values.values()) == len(its) and s.drafted_values != s.k_values
    assert sum(n * c for n, c in s.drafted_values.items()) == sum(len(r.proposed) for r in its)
    assert "; drafted " in describe_choices(s.k_values, s.drafted_values)
    shown = markup.k_text(request(k_mode="adaptive"), s)  # the browser's status line and run panel
    assert shown.startswith("adaptive (chosen: ") and "; drafted " in shown
    assert describe_choices({16: 2, 0: 1}, {16: 2, 0: 1}) == describe_choices({0: 1, 16: 2}) == "0\u00d71 16\u00d72"
    assert describe_choices({16: 2}, {3: 1, 9: 1}) == "16\u00d72; drafted 3\u00d71 9\u00d71"


def tuning_script():
    path = Path(__file__).resolve().parents[1] / "scripts" / "tune_adaptive.py"
    spec = importlib.util.spec_from_file_location("tune_adaptive", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_tuning_script_takes_settings_variants_from_its_command_line():
    """scripts/tune_adaptive.py --variant "NAME=field:value,...": an A/B of settings without patching code."""
    script = tuning_script()
    name, settings = script.parse_variant("no stop rule=confidence:false,decay:0.8")
    assert name == "no stop rule"
    assert settings == AdaptiveSettings(confidence=False, decay=0.8)
    for bad, said in [("nameless", "NAME=field:value"), ("x=foo:1", "no setting 'foo'"),
                      ("x=probe_every:0", "probe_every must be >= 1"), ("x=decay:fast", "decay takes a float"),
                      ("x=confidence:maybe", "confidence takes a bool")]:
        with pytest.raises(argparse.ArgumentTypeError, match=said):
            script.parse_variant(bad)


# (iterations, the drafter's sureness of each proposal (margins, or (probability, runner-up) pairs), proposals
# accepted of those drafted): sure and all accepted, near-ties inside long drafts, a sure drafter rejected early,
# flat but unrivalled proposals, rejections after near-ties and after sure proposals, a close rival, then sure again.
STOP_SCRIPT = [(3, [0.99] * 16, 16), (4, [0.9, 0.6, 0.3, 0.05, 0.99] * 4, 16), (5, [0.95, 0.2] * 8, 1),
               (3, [(0.2, 0.002)] * 16, 16), (4, [0.5, 0.08, 0.7] * 6, 2), (6, [0.99, 0.97, 0.04] * 6, 2),
               (4, [(0.3, 0.25), 0.8] * 8, 0), (5, [0.99] * 16, 16)]


def stopping_choices(ctl, phases=STOP_SCRIPT, finish=40):
    """"k/drafted" per iteration of a controller told its drafter stops on its confidence, through `phases`, then a
    finish of `finish` tokens drafted at sureness 0.9 and all accepted."""
    out = []
    ctl.drafter_stops(True)
    for n, qs, accepted in phases:
        for _ in range(n):
            k = ctl.next_k()
            rule = ctl.drafting_rule()
            m = drafted_under(rule, qs[:k]) if rule is not None else k
            out.append(f"{k}/{m}")
            ctl.observe(it(k, min(m, accepted), proposed=tuple(range(m))) if k else PLAIN_STEP)
    left = finish
    while left > 0:
        k = ctl.next_k(remaining=left)
        rule = ctl.drafting_rule()
        m = drafted_under(rule, [0.9] * k) if rule is not None else k
        out.append(f"{k}/{m}")
        step = it(k, m, proposed=tuple(range(m))) if k else PLAIN_STEP
        ctl.observe(step)
        left -= len(step.emitted)
    return " ".join(out)


# Recorded from the default AdaptiveK on SCRIPT_CURVE: two calls sharing one memory, and the memory after them
# (the confidence bins: per bin, the judged proposals and the accepted ones).
GOLDEN_STOPPING = (
    ('16/16 16/16 16/16 16/4 16/4 16/4 16/4 16/16 16/2 16/2 16/2 16/2 16/16 16/16 16/16 16/14 16/3 16/3 16/3 16/15 16/9 '
     '16/6 16/6 16/3 16/3 16/1 16/1 16/1 16/1 16/16 16/16 16/16 16/16 16/16 16/16 16/16 5/5'),
    ('16/16 16/16 16/16 16/4 16/4 16/4 16/4 16/2 16/2 16/2 16/2 16/2 16/16 16/16 16/16 16/3 16/3 16/3 16/3 16/6 16/6 '
     '16/6 16/3 16/3 16/3 16/1 16/1 16/1 16/1 16/16 16/16 16/16 16/16 16/16 16/16 16/16 5/5'),
    {MEMORY_KEY: {None: [[28.0, 18.0, 8.0, 16.0, 8.0, 82.0, 386.0], [16.0, 0.0, 8.0, 16.0, 0.0, 82.0, 386.0]]},
     "adaptive": {None: 0.9614337911632077}, "adaptive_evidence": {None: 93.77123343467838}},
)


def test_each_of_the_tuning_scripts_ablations_switches_its_rule_off():
    """scripts/tune_adaptive.py's default variants drop one rule each: each changes the choices on the scripts (the
    stop rule and its near-tie prior act only on a drafter that stops, so on the stop script alone), and the defaults
    are the defaults."""
    script = tuning_script()
    variants = dict(script.VARIANTS)
    assert variants.pop("defaults") == AdaptiveSettings()
    assert len(variants) == 3 and set(script.PATCHES) <= set(variants)
    for name, settings in variants.items():
        with script.patched(name):
            ablated = AdaptiveK(SCRIPT_CURVE, settings=settings)
            if "rule 4" in name:
                assert stopping_choices(ablated) != GOLDEN_STOPPING[0], name
            else:
                assert scripted_choices(ablated) != GOLDEN_DEFAULT[0], name
    assert stopping_choices(AdaptiveK(SCRIPT_CURVE)) == GOLDEN_STOPPING[0]  # every patch undone


def test_the_tuning_script_says_what_dropping_each_rule_does(capsys):
    out = {"draft": {"adaptive": {"defaults": {"a": 2.0, "b": 1.0}, "no x": {"a": 1.9, "b": 1.05}}},
           "lookup": {"adaptive": {"defaults": {"a": 1.0, "b": 1.0}, "no x": {"a": 1.0, "b": 1.0}}}}
    tuning_script().print_rule_effects(out)
    assert capsys.readouterr().out == ("no x against the defaults: largest loss -5.0% (a, draft), "
                                       "largest gain +5.0% (b, draft)\n")


def test_the_stop_rule_chooses_exactly_as_recorded():
    memory: dict = {}
    first, second, remembered = GOLDEN_STOPPING
    assert stopping_choices(AdaptiveK(SCRIPT_CURVE, memory=memory)) == first
    assert stopping_choices(AdaptiveK(SCRIPT_CURVE, memory=memory)) == second
    assert memory[MEMORY_KEY] == remembered[MEMORY_KEY]
    for key in ("adaptive", "adaptive_evidence"):
        assert memory[key] == pytest.approx(remembered[key], rel=1e-12), key

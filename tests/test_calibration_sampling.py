"""A calibration timed under the run's decoding (issue 17): the sampled one labels itself, the store and the tab keep
greedy and sampled apart, the drafter begins with the sampling config, greedy makes the calls it always made, and
speed() flags a prediction from a calibration of another decoding. No timing assertions."""

from __future__ import annotations

import pytest

import playground.drafters.proposers as proposers_mod
import playground.lab.calibration_bench as calibration_mod
from playground.cli.entry import build_parser
from playground.cli.load import sampling_of
from playground.core.sampling import GREEDY, SamplingConfig
from playground.drafters.proposers import DraftModelProposer, PromptLookupProposer
from playground.lab.calibration import (
    CalibrationPlan,
    CalibrationStore,
    Timing,
    calibrate,
    calibrated_timing,
    pass_lengths,
)
from playground.lab.speed import SpeedRequest, speed
from playground.lab.trust import WARN, check_sampling

SAMPLED = SamplingConfig(do_sample=True, temperature=0.7, top_p=0.9, seed=0)
PROMPT = [1, 2, 3, 4, 1, 2, 3]


def fake_timing(sampling: str = "greedy", context_tokens: int = 10, n_max: int = 5) -> Timing:
    return Timing(target_step_s=0.01, verify_s={n: 0.01 + 0.001 * n for n in range(1, n_max + 1)},
                  draft_step_s=0.001, context_tokens=context_tokens, sampling=sampling)


class RecordingLookup(PromptLookupProposer):
    """Prompt lookup that remembers the sampling config of every begin."""

    def __init__(self):
        super().__init__()
        self.begun: list[SamplingConfig] = []

    def begin(self, prompt_ids, ctx):
        super().begin(prompt_ids, ctx)
        self.begun.append(ctx.sampling)


@pytest.fixture
def counted(monkeypatch):
    """Counts of calibration's own sampling calls (the target's pass and the plain step), with the rows seen."""
    calls = {"probabilities": [], "choose": 0}
    real_p, real_c = calibration_mod.probabilities, calibration_mod.choose

    def probabilities(logits, sampling):
        calls["probabilities"].append(logits.shape[0])
        return real_p(logits, sampling)

    def choose(row, sampling, generator):
        calls["choose"] += 1
        return real_c(row, sampling, generator)

    monkeypatch.setattr(calibration_mod, "probabilities", probabilities)
    monkeypatch.setattr(calibration_mod, "choose", choose)
    return calls


def test_the_label_is_the_decoding_without_its_seed():
    assert GREEDY.timing_label() == "greedy"
    assert SAMPLED.timing_label() == "sample T=0.7 top-p=0.9"
    assert SamplingConfig(do_sample=True, temperature=0.7, top_p=0.9, seed=42).timing_label() == SAMPLED.timing_label()
    assert SamplingConfig(do_sample=True, top_k=20).timing_label() == "sample T=1 top-k=20"


def test_a_sampled_calibration_records_its_sampling_and_round_trips(pair64):
    proposer = DraftModelProposer(pair64.draft, pair64.device, pair64.vocab_size)
    t = calibrate(pair64, PROMPT, proposer, CalibrationPlan(n_max=3, repeats=2, warmup=1, sampling=SAMPLED))
    assert t.sampling == "sample T=0.7 top-p=0.9" and set(t.verify_s) == {1, 2, 3}
    d = t.to_dict()
    assert d["sampling"] == t.sampling
    back = Timing.from_dict(d)
    assert back is not None and back.sampling == t.sampling and back.verify_s == t.verify_s
    old = {k: v for k, v in d.items() if k != "sampling"}  # a result saved before calibrations were sampled
    assert Timing.from_dict(old).sampling == "greedy"
    assert calibrate(pair64, PROMPT, proposer, CalibrationPlan(n_max=2, repeats=1, warmup=0)).sampling == "greedy"


def test_the_store_keeps_greedy_and_sampled_apart():
    store = CalibrationStore()
    greedy = fake_timing()
    store.put("draft", greedy)
    assert store.get("draft", 10, 3) is greedy and store.get("draft", 10, 3, GREEDY) is greedy
    assert store.get("draft", 10, 3, SAMPLED) is None
    sampled = fake_timing(SAMPLED.timing_label())
    store.put("draft", sampled)
    assert store.get("draft", 10, 3, SAMPLED) is sampled and store.get("draft", 10, 3) is greedy
    assert store.get("draft", 20, 3, SamplingConfig(do_sample=True, temperature=0.7, top_p=0.9, seed=9)) is sampled
    assert store.get("draft", 10, 3, SamplingConfig(do_sample=True, temperature=1.0)) is None
    assert len(store) == 2
    only_sampled = CalibrationStore()
    only_sampled.put("draft", sampled)
    assert only_sampled.get("draft", 10, 3) is None and only_sampled.get("draft", 10, 3, SAMPLED) is sampled


def test_calibrated_timing_reuses_only_a_calibration_of_the_same_decoding(pair64):
    store = CalibrationStore()
    proposer = RecordingLookup()
    greedy = fake_timing(context_tokens=len(PROMPT))
    store.put(proposer.describe(), greedy)
    assert calibrated_timing(pair64, PROMPT, proposer, store, CalibrationPlan(n_max=3)) == (greedy, True)
    t, reused = calibrated_timing(pair64, PROMPT, proposer, store,
                                  CalibrationPlan(n_max=3, repeats=1, warmup=0, sampling=SAMPLED))
    assert not reused and t.sampling == SAMPLED.timing_label() and proposer.begun == [SAMPLED]
    assert store.get(proposer.describe(), len(PROMPT), 3, SAMPLED) is t
    assert store.get(proposer.describe(), len(PROMPT), 3) is greedy


def test_a_sampled_calibration_begins_the_proposer_with_its_sampling(pair64):
    proposer = RecordingLookup()
    calibrate(pair64, PROMPT, proposer, CalibrationPlan(n_max=2, repeats=1, warmup=0, sampling=SAMPLED))
    assert proposer.begun == [SAMPLED]
    calibrate(pair64, PROMPT, proposer, CalibrationPlan(n_max=2, repeats=1, warmup=0))
    assert proposer.begun == [SAMPLED, GREEDY]


def test_greedy_calibration_never_samples_on_the_target_side(pair64, counted):
    calibrate(pair64, PROMPT, RecordingLookup(), CalibrationPlan(n_max=3, repeats=2, warmup=1))
    assert counted == {"probabilities": [], "choose": 0}


def test_a_sampled_calibration_times_the_sampling_work_of_every_pass(pair64, counted):
    repeats, warmup, n_max = 2, 1, 5
    calibrate(pair64, PROMPT, RecordingLookup(),
              CalibrationPlan(n_max=n_max, repeats=repeats, warmup=warmup, sampling=SAMPLED))
    # every verifying pass computes the distributions over its n rows; every plain step draws one token (two
    # plain steps a repetition: the first, after the drafter, untimed)
    assert sorted(counted["probabilities"]) == sorted(pass_lengths(n_max) * (repeats + warmup))
    assert counted["choose"] == 2 * (repeats + warmup)


def test_a_sampled_model_drafter_samples_in_its_proposals(pair64, monkeypatch):
    seen = []
    real = proposers_mod.probabilities

    def probabilities(logits, sampling):
        seen.append(sampling)
        return real(logits, sampling)

    monkeypatch.setattr(proposers_mod, "probabilities", probabilities)
    proposer = DraftModelProposer(pair64.draft, pair64.device, pair64.vocab_size)
    calibrate(pair64, PROMPT, proposer, CalibrationPlan(n_max=2, repeats=1, warmup=0, sampling=SAMPLED))
    assert seen and all(s == SAMPLED for s in seen)


def test_check_sampling_flags_a_calibration_of_another_decoding():
    assert check_sampling(fake_timing(), "greedy") == []
    assert check_sampling(fake_timing("sample T=0.7"), "sample T=0.7") == []
    (f,) = check_sampling(fake_timing(), "sample T=0.7")
    assert f.check == "calibration-sampling" and f.severity == WARN
    assert "calibrated under greedy, run sample T=0.7" in f.message and "leaves out the sampling work" in f.message
    assert f.fix == "calibrate with the run's sampling settings"
    assert "does not do" in check_sampling(fake_timing("sample T=0.7"), "greedy")[0].message


def _findings(doc) -> list[str]:
    return [f.check for f in doc.trust.findings]


@pytest.mark.parametrize(("timed", "run", "flagged"), [
    ("greedy", SAMPLED, True),
    (SAMPLED.timing_label(), SAMPLED, False),
    ("greedy", GREEDY, False),
    (SAMPLED.timing_label(), GREEDY, True),
])
def test_speed_flags_a_prediction_from_another_decodings_calibration(pair64, timed, run, flagged):
    doc = speed(SpeedRequest(pair64, {"a": PROMPT}, RecordingLookup, ks=(2,), rounds=2, max_new_tokens=4,
                             sampling=run, timing=fake_timing(timed, context_tokens=len(PROMPT))))
    assert ("calibration-sampling" in _findings(doc)) is flagged
    assert doc.timing["sampling"] == timed


def test_the_tab_finds_only_a_calibration_of_the_runs_decoding():
    from playground.run import find_timing
    from playground.ui.session import Session, prompt_key

    session, store = Session(), CalibrationStore()
    session.timings[("draft", prompt_key(PROMPT))] = fake_timing()
    assert find_timing(session.conversation, store, "draft", PROMPT, 3) is not None
    assert find_timing(session.conversation, store, "draft", PROMPT, 3, SAMPLED) is None
    sampled = fake_timing(SAMPLED.timing_label(), context_tokens=len(PROMPT))
    store.put("draft", sampled)
    assert find_timing(session.conversation, store, "draft", PROMPT, 3, SAMPLED) is sampled


def test_the_timing_command_takes_the_decoding():
    args = build_parser().parse_args(["timing", "--sample", "--temperature", "0.7", "--top-p", "0.9"])
    assert sampling_of(args).timing_label() == SAMPLED.timing_label()
    assert sampling_of(build_parser().parse_args(["timing"])).greedy

"""The draft confidence stop in the browser (one control, read by Run, Compare, the sweep and Replay) and in the
lab's figures (no fixed-k prediction under it), and the prediction panel's costed row: a run's own iterations at
the calibration's step costs, for every kind of run."""

from __future__ import annotations

import pytest
import torch

from playground.core import engine
from playground.core.cost import verify_cost
from playground.core.records import Iteration, Step
from playground.drafters.registry import make_proposer, names
from playground.errors import PlaygroundError
from playground.lab.misses import prediction_lines
from playground.lab.speed import SpeedRequest, speed
from playground.limits import Limits
from playground.pairs.models import ModelPair
from playground.ui import handlers, markup, measure, replay_request, run_panel, serving
from playground.ui.session import Session, parse_request, parse_sweep
from tests.test_replay import fake_timing
from tests.test_ui_handlers import sweep_result
from tests.tiny import perturbed, tiny_model, word_tokenizer

WORDS = [f"w{i}" for i in range(63)]  # + "<eos>" = 64 tokens
PROMPT = "w1 w2 w3 w4 w5 w1 w2 w3"
CONTROLS = {"prompt": PROMPT, "preset": "", "chat": True, "drafter": "draft", "k": 4, "decoding": "greedy",
            "temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 24, "seed": 0}
STOP = 0.5  # the tiny target's greedy tokens have probabilities from about 0.2 to 0.7: some drafts stop, some not


@pytest.fixture(scope="module")
def word_pair():
    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    return ModelPair(target=target, tokenizer=word_tokenizer(WORDS), draft=perturbed(target, noise=0.015),
                     eos_ids=frozenset({63}), target_name="tiny-target", draft_name="tiny-draft")


@pytest.fixture
def provider(word_pair):
    """A provider whose shared calibration of the draft drafter has round numbers: c = 0.2, v(n) = 1 + 0.05 (n - 1)."""
    p = serving.PairProvider(pair=word_pair)
    p.calibrations.put(make_proposer(word_pair, "draft").describe(), fake_timing())
    return p


def request(**changes):
    return parse_request({**CONTROLS, **changes}, names())


def run(provider, session=None, **changes):
    return list(run_panel.stream_run(provider, session if session is not None else Session(), request(**changes)))


def iterations(run_result) -> list[Iteration]:
    return [r for r in run_result.records if isinstance(r, Iteration)]


def by_hand(its, timing) -> float:
    """Tokens over target steps, each iteration costed as lab.schedules says: drafted * c + v(drafted + 1) + o."""
    steps = sum(len(r.proposed) * timing.c + verify_cost(timing.v, len(r.proposed) + 1) + timing.overhead
                for r in its)
    return sum(len(r.emitted) for r in its) / steps


def test_the_stop_is_off_at_zero_or_empty_and_a_probability_otherwise():
    for off in (None, "", " ", 0, 0.0, "0"):
        assert request(min_confidence=off).min_confidence is None
    assert request(min_confidence=0.4).min_confidence == 0.4 and request(min_confidence="0.25").min_confidence == 0.25
    assert request(min_confidence=1).min_confidence == 1.0
    for bad, message in ((1.5, "from 0 to 1"), (-0.1, "from 0 to 1"), ("often", "must be a number"),
                         (True, "must be a number"), (float("nan"), "finite")):
        with pytest.raises(PlaygroundError, match=message):
            request(min_confidence=bad)
    assert "drafting stopped below confidence 0.4" in markup.k_text(request(min_confidence=0.4))
    assert markup.k_text(request()) == "4"


def test_a_run_with_the_stop_drafts_as_the_engine_does_with_it_and_says_so(provider, word_pair):
    views = run(provider, min_confidence=STOP)
    final = views[-1]
    result = final.session.run
    drafted = [len(r.proposed) for r in iterations(result)]
    live = [r for r in engine.speculative_generate(word_pair, result.prompt_ids, proposer=make_proposer(word_pair,
            "draft"), k=4, min_confidence=STOP, max_new_tokens=24) if isinstance(r, Iteration)]
    assert drafted == [len(r.proposed) for r in live]
    assert any(0 < d < 4 for d in drafted[:-1]) and any(d == 4 for d in drafted)  # stopped short, and not always
    plain = [r.token for r in engine.plain_generate(word_pair, result.prompt_ids, max_new_tokens=24)
             if isinstance(r, Step)]
    assert [t for r in iterations(result) for t in r.emitted] == plain  # greedy: the stop changes no token
    assert final.doc["config"]["min_confidence"] == STOP
    assert "drafting stopped below confidence 0.5" in views[1].status and "confidence 0.5" in final.status
    without = [len(r.proposed) for r in iterations(run(provider)[-1].session.run)]
    assert sum(without) / len(without) > sum(drafted) / len(drafted) + 1  # without the stop it drafts far more


def test_the_costed_row_is_the_runs_own_iterations_at_the_calibrations_step_costs(provider):
    session = Session()
    final = run(provider, session)[-1]
    timing = fake_timing()
    its = iterations(session.run)
    text = final.prediction
    assert "costed: this run's own iterations" in text and f"**{by_hand(its, timing):.2f}\u00d7**" in text
    assert "per-position acceptance" in text  # a fixed k without a stop keeps the model's own prediction
    assert "<dt>costed</dt>" in text and "<dt>confidence stop</dt>" in text  # both terms in the glossary


def test_a_stopped_run_gets_the_costed_row_and_no_fixed_k_prediction(provider):
    session = Session()
    final = run(provider, session, min_confidence=STOP)[-1]
    its = iterations(session.run)
    text = final.prediction
    assert f"**{by_hand(its, fake_timing()):.2f}\u00d7**" in text
    assert "per-position acceptance" not in text and "predicted, iid" not in text
    mean = sum(len(r.proposed) for r in its) / len(its)
    assert f"{mean:.1f} of k = 4 drafted per iteration on average" in text


@pytest.mark.parametrize("mode", ["adaptive", "heuristic"])
def test_a_run_that_chose_k_gets_the_costed_row_and_what_each_fixed_k_would_give(provider, mode):
    session = Session()
    final = run(provider, session, k_mode=mode)[-1]
    its = iterations(session.run)
    assert f"**{by_hand(its, fake_timing()):.2f}\u00d7**" in final.prediction
    assert "Predicted speed-up per k at this run's" in final.prediction
    compare = list(handlers.stream_compare(provider, session))[-1]
    assert "costed: this run's own iterations" in compare.prediction and "measured" in compare.prediction


def test_without_a_calibration_there_is_no_costed_row(word_pair):
    final = run(serving.PairProvider(pair=word_pair), k_mode="heuristic")[-1]
    assert "costed: this run" not in final.prediction and "k was chosen per iteration" in final.prediction


def sweep_with_stop(provider, drafter: str) -> tuple[float | None, list[str]]:
    """A sweep asked with the stop, its lab part faked: the stop the lab was given, and the status lines."""
    seen = {}

    def fake_sweep(request, progress=None):
        seen["min_confidence"] = request.min_confidence
        return sweep_result()

    controls = {n: CONTROLS[n] for n in ("prompt", "preset", "chat", "decoding", "temperature", "top_k", "top_p",
                                         "seed")}
    req = parse_sweep({**controls, "drafter": drafter, "k_max": 2, "rounds": 1, "max_new_tokens": 8,
                       "min_confidence": STOP}, names())
    lines = [view.status for view in measure.stream_sweep(provider, Session(), req, sweep_fn=fake_sweep)]
    return seen["min_confidence"], lines


def test_the_sweep_takes_the_stop_and_says_it_predicts_no_fixed_k_under_it(provider):
    stop, lines = sweep_with_stop(provider, "draft")
    assert stop == STOP
    assert any("drafting stopped below confidence 0.5, so no fixed-k prediction" in line for line in lines)


def test_the_lab_predicts_no_fixed_k_under_a_stop_and_costs_what_was_drafted(word_pair):
    ids = word_pair.tokenizer(PROMPT)["input_ids"]

    def factory():
        return make_proposer(word_pair, "draft")

    kw = dict(ks=[3], rounds=1, max_new_tokens=12, timing=fake_timing())
    stopped = speed(SpeedRequest(word_pair, {"p": ids}, factory, min_confidence=STOP, **kw))
    row = stopped.table[0]
    assert row.predicted_iid is None and row.predicted_empirical is None
    assert all(x.predicted_empirical is None for x in stopped.runs)
    drafted = [r[6] for r in stopped.runs[0].iterations]
    assert any(d < 3 for d in drafted[:-1]) and row.median_costed is not None
    full = speed(SpeedRequest(word_pair, {"p": ids}, factory, **kw))
    assert full.table[0].predicted_iid is not None and full.table[0].predicted_empirical is not None
    assert "none at a fixed k under a confidence stop" in prediction_lines(stopped)[1]  # what the CLI prints
    assert prediction_lines(full)[1].startswith("prediction: within 0.05")


def test_replay_takes_the_run_tabs_stop_and_refuses_it_with_sampling():
    base = {"source": "sample", "trace_file": None, "presets": [], "drafter": "draft", "ks": "1-4",
            "controllers": ["adaptive"], "calibration": "once", **{n: CONTROLS[n] for n in (
                "decoding", "temperature", "top_k", "top_p", "seed")}}
    assert replay_request.parse_replay({**base, "min_confidence": 0.4}, ["draft"], Limits()).min_confidence == 0.4
    assert replay_request.parse_replay({**base, "min_confidence": 0}, ["draft"], Limits()).min_confidence is None
    with pytest.raises(PlaygroundError, match="greedy decoding only"):
        replay_request.parse_replay({**base, "min_confidence": 0.4, "decoding": "sample"}, ["draft"], Limits())


def test_the_page_has_the_stop_control_and_every_event_reads_it(word_pair):
    from playground.ui.blocks import build_ui

    demo = build_ui(serving.PairProvider(pair=word_pair))
    config = demo.get_config_file()
    stop = [c for c in config["components"] if c.get("props", {}).get("elem_id") == "min-confidence"]
    assert len(stop) == 1 and stop[0]["props"]["value"] == 0.0
    reads = {d.get("api_name") for d in config["dependencies"] if stop[0]["id"] in d.get("inputs", [])}
    assert {"run", "sweep", "replay"} <= reads and "calibrate" not in reads  # a calibration drafts all k


@pytest.mark.parametrize("mode", ["fixed", "heuristic"])  # (adaptive would see the cost and decode plainly)
def test_a_compare_far_from_its_prediction_fails_on_the_page_and_in_the_download_alike(word_pair, mode):
    """A calibration that makes drafting 20x dearer than it is: the prediction (the model's at a fixed k, the
    run's own iterations costed where k varied) is far below the measurement, and both verdicts say so."""
    p = serving.PairProvider(pair=word_pair)
    p.calibrations.put(make_proposer(word_pair, "draft").describe(), fake_timing(c=20.0))
    session = Session()
    list(run_panel.stream_run(p, session, request(k_mode=mode)))
    final = list(handlers.stream_compare(p, session))[-1]
    checks = {f["check"]: f["severity"] for f in final.doc["trust"]["findings"]}
    assert checks.get("prediction-miss") == "fail" and "-fold" in final.prediction


def test_prompt_lookup_has_nothing_to_stop_on_so_its_run_claims_no_stop(word_pair):
    p = serving.PairProvider(pair=word_pair)
    p.calibrations.put(make_proposer(word_pair, "lookup").describe(), fake_timing())
    session = Session()
    views = run(p, session, drafter="lookup", min_confidence=STOP)
    final = views[-1]
    assert session.run.request.min_confidence is None and final.doc["config"]["min_confidence"] is None
    assert not any("confidence" in v.status for v in views)
    assert "per-position acceptance" in final.prediction  # the fixed-k model applies: lookup drafted as it would

    stop, lines = sweep_with_stop(p, "lookup")
    assert stop is None and not any("confidence" in line for line in lines)
    assert [make_proposer(word_pair, d).confidence_stops for d in ("draft", "hybrid", "lookup")] == [True, True, False]

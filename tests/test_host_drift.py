"""The drift rule of a run over many prompts: one prompt whose plain runs moved fails its own figures and only
warns the figures over every prompt; the host's level moving under every prompt fails them all; with fewer than
three prompts, any prompt's drift fails the whole run, as it always has."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from playground.drafters.proposers import DraftModelProposer
from playground.lab.speed import SpeedRequest, speed
from playground.lab.speed.cells import drift_by_prompt, host_level, verdicts
from playground.lab.trust import FAIL, WARN, MachineLoad, MachineMonitor
from playground.results.speed import PlainRun

QUIET = MachineLoad(wall_s=60.0, other_cores=0.01, steal=0.0, cores=2)
STEADY = [30.0, 30.3, 29.8]


def judged(speeds: dict[str, list[float]]):
    request = SimpleNamespace(rounds=3, prompts=list(speeds), drift_warning=0.15, timing_of=lambda name: None)
    plain = [PlainRun(round=r, prompt=name, tokens_per_s=x) for name, xs in speeds.items() for r, x in enumerate(xs)]
    drift = drift_by_prompt(request, plain)
    host = host_level(request, drift)
    return host, *verdicts(request, drift, host, QUIET)


def test_one_prompt_moving_fails_its_own_figures_and_warns_the_pooled_ones():
    speeds = {f"turn {i}": [s * (1 + 0.01 * i) for s in STEADY] for i in range(6)}
    speeds["turn 3"] = [31.5, 37.0, 34.0]  # 16%, as one turn of an agent's trace moved on a steady host
    host, overall, own = judged(speeds)
    assert not host.flagged and host.spread < 0.05
    assert overall.trusted
    (warning,) = overall.findings
    assert warning.severity == WARN and "turn 3 moved 16%" in warning.message and "one prompt" in warning.message
    assert not own["turn 3"].trusted and own["turn 3"].findings[0].severity == FAIL
    assert all(v.trusted and not v.findings for name, v in own.items() if name != "turn 3")


def test_the_host_moving_under_every_prompt_fails_the_pooled_figures():
    slower = [1.0, 0.82, 0.8]  # every prompt 18-20% slower after the first round
    speeds = {f"turn {i}": [(20 + 3 * i) * f for f in slower] for i in range(6)}
    host, overall, own = judged(speeds)
    assert host.flagged and host.spread == pytest.approx(0.2 / 0.82, rel=1e-6)
    assert not overall.trusted
    assert overall.findings[0].severity == FAIL and "the 6 prompts moved 24%" in overall.findings[0].message
    assert "host under it changed speed" in overall.findings[0].fix
    assert not any(v.trusted for v in own.values())


def test_with_two_prompts_one_moving_still_fails_everything():
    host, overall, own = judged({"a": STEADY, "b": [31.5, 37.0, 34.0]})
    assert host is None
    assert not overall.trusted and overall.findings[0].severity == FAIL
    assert own["a"].trusted and not own["b"].trusted


@pytest.fixture
def quiet(monkeypatch):
    monkeypatch.setattr(MachineMonitor, "stop", lambda self: MachineLoad(1.0, 0.0, 0.0, 2))


PROMPTS = {name: [5 * i + j + 1 for j in range(5)] for i, name in enumerate("abcde")}


def slowed_speed(pair, slowed: set[str]):
    """lab.speed over five prompts, every target forward made to sleep 5 ms, and 20 ms for the prompts in `slowed`
    after round 1 (a pre-hook; the prompt is told by the prefill's tokens, the round by the progress messages).
    The tiny target alone takes ~0.4 ms a token, which a loaded machine moves by a third: the base sleep makes
    the steady prompts steady wherever the test runs."""
    state = {"round": 1, "prompt": None}

    def hook(module, args):
        ids = args[0].reshape(-1).tolist()  # [1, n] from transformers, [n] from the static forward
        if len(ids) == 4:  # a prefill (all but the prompt's last token): no verify pass is longer than k + 1 = 3
            state["prompt"] = next(name for name, p in PROMPTS.items() if p[:4] == ids)
        time.sleep(0.02 if state["round"] > 1 and state["prompt"] in slowed else 0.005)

    def progress(fraction, message):
        state["round"] = int(message.split("/")[0].removeprefix("round "))

    handle = pair.target.model.embed_tokens.register_forward_pre_hook(hook)
    try:
        return speed(SpeedRequest(pair, PROMPTS, lambda: DraftModelProposer(pair.draft, pair.device, pair.vocab_size),
                                  ks=(1, 2), rounds=3, max_new_tokens=16), progress=progress)
    finally:
        handle.remove()


def test_live_one_slowed_prompt_fails_only_its_own_rows(pair64, quiet):
    res = slowed_speed(pair64, {"b"})
    assert res.drift["b"].flagged
    # b's drift only warns the figures over every prompt, and a prompt's row carries a drift finding only where
    # its own plain runs moved. Whether the other prompts held, the host's level too, and so whether the pooled
    # figures are trusted, is left to the hand-made figures above: under load a steady prompt's plain runs moved
    # 20% in this test, which the rule rightly flags on that prompt's rows.
    assert [f.severity for f in res.trust.findings if f.check == "drift" and "plain decoding of b " in f.message] == [WARN]
    assert all(not row.trust.trusted for row in res.by_prompt if row.prompt == "b")
    for row in res.by_prompt:
        assert any(f.check == "drift" for f in row.trust.findings) == res.drift[row.prompt].flagged, row.prompt


def test_live_a_slowed_host_fails_the_run(pair64, quiet):
    res = slowed_speed(pair64, set(PROMPTS))
    assert res.host_drift.flagged
    assert not res.trust.trusted and res.recommended_k is None
    assert all(not row.trust.trusted for row in res.table)

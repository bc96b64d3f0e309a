"""The run service (playground.run): generate, the browser's Run tab and the lab's speed arms run through it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import playground.pairs.registry
from playground.__main__ import main
from playground.core.records import Iteration
from playground.drafters.conversation import Conversation
from playground.errors import PlaygroundError
from playground.lab.speed import SpeedRequest
from playground.lab.speed.run import _run_spec
from playground.limits import Limits
from playground.run import RunSpec, prepare
from playground.ui import run_panel, serving
from playground.ui.session import Session
from tests.test_ui_handlers import PROMPT, request, word_pair  # noqa: F401 - the fixture

SPEC = RunSpec(drafter="draft", k=3, prompt=PROMPT, chat=False, max_new_tokens=12)


def emitted(records) -> list[int]:
    return [t for r in records if isinstance(r, Iteration) for t in r.emitted]


def test_generate_the_run_tab_and_a_lab_arm_run_the_same_loop(word_pair, monkeypatch, capsys):  # noqa: F811
    run = prepare(word_pair, SPEC)
    alone = emitted(run.records())
    monkeypatch.setattr(playground.pairs.registry, "load_pair", lambda *a, **k: word_pair)
    assert main(["generate", "--drafter", "draft", "--k", "3", "--prompt", PROMPT, "--raw", "--max-new-tokens", "12",
                 "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [t for r in doc["records"] if r["type"] == "Iteration" for t in r["emitted"]] == alone
    assert doc["config"] == run.document(run.finish())["config"]
    provider = serving.PairProvider(pair=word_pair)
    tab = Session()
    list(run_panel.stream_run(provider, tab, request(provider, prompt=PROMPT, chat=False, k=3, max_new_tokens=12)))
    assert emitted(tab.run.records) == alone and tab.run.text == run.finish().text
    lab = SpeedRequest(word_pair, {"p": run.prompt_ids}, lambda: Conversation().proposer(word_pair, "draft"), ks=(3,))
    summary, rows = _run_spec(lab, "p", 3, 12, None, Conversation())
    assert summary.new_tokens == len(alone) and len(rows) == summary.target_passes


def test_the_length_defaults_within_the_limits_and_the_prompt_is_checked(word_pair):  # noqa: F811
    run = prepare(word_pair, RunSpec(drafter="lookup", prompt=PROMPT, chat=False))
    assert run.spec.max_new_tokens == 64 and run.preset is None
    capped = prepare(word_pair, RunSpec(drafter="lookup", prompt=PROMPT, chat=False),
                     limits=Limits(max_new_tokens=40))
    assert capped.spec.max_new_tokens == 40
    with pytest.raises(PlaygroundError, match="prompt"):
        prepare(word_pair, RunSpec(drafter="lookup", prompt=PROMPT, chat=False), limits=Limits(max_prompt_tokens=2))
    with pytest.raises(PlaygroundError, match="context"):
        prepare(word_pair, RunSpec(drafter="lookup", prompt=PROMPT, chat=False, max_new_tokens=10**6))


def test_a_confidence_stop_is_dropped_for_a_drafter_with_nothing_to_stop_on(word_pair):  # noqa: F811
    assert prepare(word_pair, RunSpec(drafter="lookup", prompt=PROMPT, chat=False, min_confidence=0.5)
                   ).spec.min_confidence is None
    kept = prepare(word_pair, RunSpec(drafter="draft", prompt=PROMPT, chat=False, min_confidence=0.5))
    assert kept.spec.min_confidence == 0.5 and kept.config().min_confidence == 0.5


def test_adaptive_k_calibrates_once_per_conversation_and_prompt(word_pair):  # noqa: F811
    spec = RunSpec(drafter="draft", k="adaptive", prompt=PROMPT, chat=False, max_new_tokens=8)
    conversation = Conversation()
    first = prepare(word_pair, spec, conversation)
    assert first.needs_calibration and first.curve is None
    assert emitted(first.records()) and first.curve is not None  # records() calibrated before the loop
    assert first.document(first.finish())["config"]["cost_curve"] is not None
    again = prepare(word_pair, spec, conversation)
    assert not again.needs_calibration and again.timing is first.timing
    assert prepare(word_pair, spec, Conversation()).needs_calibration  # another conversation has none
    assert not prepare(word_pair, RunSpec(drafter="draft", k=3, prompt=PROMPT, chat=False)).needs_calibration


def test_the_service_imports_first_in_a_fresh_interpreter():
    """playground.run loads the lab's calibration, and the lab's speed arms use the service: in a test process both
    are already loaded, so only a fresh interpreter shows whether importing one first finds the other half-made."""
    done = subprocess.run([sys.executable, "-c", "import playground.run"], check=False, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]

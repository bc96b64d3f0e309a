"""A drafter is declared once (playground.drafters.registry): a toy drafter registered here is offered by the
CLI's parsers, the browser's menus, replay and the lab, runs in each, and is gone from all of them once withdrawn.
A reader that kept its own list of names would not offer it: that is the power of the first test."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import re
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import playground.pairs.registry
from playground.cli import build_parser, main
from playground.core.engine import speculative_generate
from playground.core.proposal import Proposal, Proposer
from playground.core.records import Iteration
from playground.core.sampling import SamplingConfig
from playground.drafters import registry
from playground.drafters.conversation import Conversation
from playground.drafters.registry import DrafterSpec, PairFacts, Source, make_proposer
from playground.errors import PlaygroundError
from playground.experiments import experiments
from playground.lab import acceptance
from playground.lab.replay import ReplayOptions, greedy_turn, replay_turns
from playground.lab.speed import SpeedRequest, speed
from playground.lab.speed.trace import TraceTurns
from playground.pairs.models import ModelPair
from playground.ui import handlers, render, run_panel, serving, session
from tests.tiny import perturbed, tiny_model, word_tokenizer

TOY = "zeros"
LAB_COMMANDS = [e.name for e in experiments() if e.run is not None]


class ZeroProposer(Proposer):
    """Always proposes token 0, k times."""

    name = "zeros"

    def propose(self, tokens, k: int) -> Proposal:
        return Proposal((0,) * k)


def _toy() -> DrafterSpec:
    return DrafterSpec(TOY, "all zeros", "always proposes token 0 (a test's toy)", lambda pair, **_: ZeroProposer())


@pytest.fixture
def toy():
    """The toy drafter, registered for one test and withdrawn after it, so that other tests never see it."""
    spec = registry.register_drafter(_toy())
    yield spec
    registry.unregister_drafter(TOY)


def _drafter_choices(command: str) -> list[str]:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    (drafter,) = [a for a in sub.choices[command]._actions if a.dest == "drafter"]
    return list(drafter.choices)


READERS = {  # each reader's drafter list, on a pair with a draft model
    "cli generate": lambda pair: _drafter_choices("generate"),
    "cli replay": lambda pair: _drafter_choices("replay"),
    "browser menu": lambda pair: [name for _, name in serving.PairProvider(pair=pair).drafter_choices()],
    "browser request": lambda pair: [name for name in ("lookup", TOY) if _accepted(name)],
    "replay": lambda pair: registry.available_drafters(pair),
    **{f"lab {c}": (lambda pair, c=c: _drafter_choices(c)) for c in LAB_COMMANDS},
}


def _accepted(name: str) -> bool:
    """Whether a browser request (session.parse_request, with no pair's list given) takes this drafter."""
    controls = {"prompt": "w1", "preset": None, "drafter": name, "k": 2, "decoding": "greedy", "max_new_tokens": 4,
                "temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0}
    try:
        session.parse_request(controls)
    except PlaygroundError:
        return False
    return True


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_offers_a_registered_drafter_and_forgets_it_when_withdrawn(reader, pair64):
    builtin = READERS[reader](pair64)
    assert TOY not in builtin and "lookup" in builtin
    registry.register_drafter(_toy())
    try:
        assert TOY in READERS[reader](pair64)
    finally:
        registry.unregister_drafter(TOY)
    assert TOY not in READERS[reader](pair64)


def test_the_browser_shows_its_label_and_the_drafter_runs_in_the_lab_and_replay(toy, pair64):
    assert ("all zeros", TOY) in serving.PairProvider(pair=pair64).drafter_choices()
    res = acceptance(pair64, {"p": ("prose", [1, 2, 3, 4], 6)}, lambda: make_proposer(pair64, TOY), ks=(2,))
    assert res.rows[0].k == 2
    turn = greedy_turn(pair64, "t", [1, 2, 3, 4, 1, 2], 8, "text")
    greedy = replay_turns(pair64, [turn], ReplayOptions(drafters=[TOY], ks=[1, 2], controllers=()))
    walks = greedy.turns[0].drafters[TOY].walks
    assert greedy.drafters == [TOY] and set(walks) == {"k=1", "k=2"}
    assert greedy.turns[0].drafters[TOY].feeding is None  # model-free: walked by its own proposer
    sampled = replay_turns(pair64, [turn], ReplayOptions(drafters=[TOY], ks=[2], controllers=(),
                                                         sampling=SamplingConfig(do_sample=True, temperature=1.0,
                                                                                 seed=0)))
    assert sampled.turns[0].drafters[TOY].walks["k=2"].expected is True


def test_availability_is_declared_once_and_read_by_every_menu(toy, pair64):
    needy = registry.register_drafter(DrafterSpec("needy", "needy", "needs the embedded target", lambda pair, **_: None,
                                          requires=lambda f: None if f.embedded_target else "embedded only"))
    try:
        assert needy.available(pair64) == (False, "embedded only")
        assert "needy" not in registry.available_drafters(pair64)
        assert "needy" not in [n for _, n in serving.PairProvider(pair=pair64).drafter_choices()]
        assert needy.available(PairFacts(has_draft=False, embedded_target=True)) == (True, "")
        with pytest.raises(PlaygroundError, match="embedded only"):
            make_proposer(pair64, "needy")
    finally:
        registry.unregister_drafter("needy")


def test_auto_and_hybrid_keep_their_meaning(toy, pair64):
    """A drafter registered after the built-ins is not picked by auto (not marked `auto`) nor wrapped by the
    hybrid (not a model drafter): auto is still the draft model on a pair with one, the hybrid around it."""
    assert registry.default_drafter(pair64)[0] == "draft"
    assert registry.model_drafter(pair64) == "draft"
    assert make_proposer(pair64, "hybrid").model.name == pair64.draft_name


def test_a_name_is_declared_once():
    with pytest.raises(PlaygroundError, match="already registered"):
        registry.register_drafter(DrafterSpec("lookup", "x", "x", lambda pair, **_: None))
    with pytest.raises(PlaygroundError, match="cannot be named"):
        registry.register_drafter(DrafterSpec("auto", "x", "x", lambda pair, **_: None))
    with pytest.raises(PlaygroundError, match="unknown drafter 'telepathy'; choose one of auto, llama.cpp"):
        registry.drafter_spec("telepathy")


RECIPE = Path(__file__).resolve().parents[1] / "docs" / "drafters.md"


def _recipe() -> tuple[str, str]:
    """docs/drafters.md's "Adding a drafter": its two pieces of code (the module, the registration), as written."""
    section = RECIPE.read_text(encoding="utf-8").split("\n## Adding a drafter\n", 1)[1].split("\n## ", 1)[0]
    module, registration = (textwrap.dedent(b) for b in re.findall(r"^ *```python\n(.*?)^ *```", section,
                                                                    flags=re.MULTILINE | re.DOTALL))
    return module, registration


@pytest.fixture
def recipe(tmp_path, monkeypatch):
    """The recipe followed in a package of its own: its module as repeat.py, and its registration in a module
    that starts as the registry does (`from __future__ import annotations`, the registry's names); the drafter is
    withdrawn after the test."""
    module, registration = _recipe()
    package = tmp_path / "recipe_drafters"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "repeat.py").write_text(module)
    (package / "registration.py").write_text(
        "from __future__ import annotations\n\nfrom playground.core.proposal import Proposer\n"
        "from playground.drafters.registry import DrafterSpec, Source, register_drafter\n\n\n" + registration)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module("recipe_drafters.registration")
        yield "repeat"
    finally:
        registry.unregister_drafter("repeat")
        for name in ("recipe_drafters.registration", "recipe_drafters.repeat", "recipe_drafters"):
            sys.modules.pop(name, None)


def test_the_docs_recipe_adds_a_drafter_that_every_reader_offers_and_runs(recipe, pair64):
    offered = {name: recipe in reader(pair64) for name, reader in READERS.items() if name != "browser request"}
    assert all(offered.values()) and _accepted(recipe), offered  # (the browser request reader asks for the toy)
    proposer = make_proposer(pair64, recipe)
    assert proposer.propose([5, 6, 7], 3).tokens == (7, 7, 7)
    assert registry.source("repeat").copies and registry.drafter_spec(recipe).new_memory is None
    res = acceptance(pair64, {"p": ("prose", [1, 2, 3, 4], 6)}, lambda: make_proposer(pair64, recipe), ks=(2,))
    assert res.rows[0].k == 2
    turn = greedy_turn(pair64, "t", [1, 2, 3, 3, 3, 2], 8, "text")
    walks = replay_turns(pair64, [turn], ReplayOptions(drafters=[recipe], ks=[1, 2], controllers=()))
    assert set(walks.turns[0].drafters[recipe].walks) == {"k=1", "k=2"}


# --- a drafter with a memory and two sources -------------------------------------------------------------------
# "recall" proposes the first token of the latest earlier answer its memory holds ("recalled"), else the context's
# last token ("echo"); it stores its own run's first output token for the runs after it. Each caller that keeps a
# conversation (the library's generate, the browser tab, a lab speed trace turn, a replayed arm) carries that
# memory from one turn to the next; its "fresh" variant ignores the memory it is handed (a new one each run), and
# each test shows the difference, so a caller that dropped the memory would fail it.

RECALL = "recall"
RECALLED = Source("recalled", "repeated from an earlier answer (a toy)", copies=True, cost="search")
ECHO = Source("echo", "the last token again (a toy)", cost="search")


class Answers:
    """The toy's memory: the first token of each answer it saw, oldest first."""

    def __init__(self):
        self.firsts: list[int] = []

    def add_response(self, prompt_ids, response_ids) -> None:
        if len(response_ids):
            self.firsts.append(int(response_ids[0]))

    def clear(self) -> None:
        self.firsts.clear()

    def describe(self) -> str:
        return f"the toy remembers {len(self.firsts)} answer(s)"


class RecallProposer(Proposer):
    name = RECALL

    def __init__(self, memory: Answers | None = None):
        self.memory = memory if memory is not None else Answers()

    def begin(self, prompt_ids, ctx) -> None:
        super().begin(prompt_ids, ctx)
        self._start, self._stored, self._earlier = len(prompt_ids), False, list(self.memory.firsts)

    def propose(self, tokens, k: int) -> Proposal:
        if not self._stored and len(tokens) > self._start:  # this run's first output token, for the runs after it
            self.memory.add_response((), tokens[self._start:self._start + 1])
            self._stored = True
        if self._earlier:
            return Proposal((self._earlier[-1],) * k, sources=(RECALLED.name,) * k)
        return Proposal((int(tokens[-1]),) * k, sources=(ECHO.name,) * k)


RECALL_SPEC = DrafterSpec(RECALL, "recall", "the first token of an earlier answer (a test's toy)",
                          lambda pair, memory=None, **_: RecallProposer(memory), sources=(RECALLED, ECHO),
                          new_memory=Answers)


@pytest.fixture(scope="module")
def word_pair():
    """The browser tests' pair (tests/test_ui_handlers.py): words w0..w62 and <eos>."""
    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    return ModelPair(target=target, tokenizer=word_tokenizer([f"w{i}" for i in range(63)]),
                     draft=perturbed(target, noise=0.015), eos_ids=frozenset({63}), target_name="tiny-target",
                     draft_name="tiny-draft")


@pytest.fixture(params=["carried", "fresh"])
def recall(request):
    """The toy registered for one test: True where its memory is carried, False for the variant whose build
    ignores the memory it is handed."""
    carried = request.param == "carried"
    spec = RECALL_SPEC if carried else dataclasses.replace(RECALL_SPEC, build=lambda pair, **_: RecallProposer())
    registry.register_drafter(spec)
    yield carried
    registry.unregister_drafter(RECALL)


def _sources(records) -> set[str]:
    return {s for r in records if isinstance(r, Iteration) for s in r.sources or ()}


def test_a_drafter_with_a_memory_carries_it_in_the_librarys_generate(recall, pair64, word_pair, monkeypatch, capsys):
    conversation = Conversation()
    runs = [list(speculative_generate(pair64, prompt, proposer=conversation.proposer(pair64, RECALL), k=2,
                                      max_new_tokens=6)) for prompt in ([1, 2, 3, 4], [5, 6, 7, 8])]
    assert _sources(runs[0]) == {"echo"}
    assert ("recalled" in _sources(runs[1])) is recall  # the second turn proposes what the first stored
    assert registry.one_cost(RECALL) and registry.source("recalled") == RECALLED
    assert render.source_label("recalled") == RECALLED.label and render.copied("recalled")
    monkeypatch.setattr(playground.pairs.registry, "load_pair", lambda *a, **k: word_pair)
    assert main(["generate", "--drafter", RECALL, "--prompt", "w1 w2 w3", "--max-new-tokens", "6"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_a_browser_tab_carries_a_drafters_memory_from_run_to_run(recall, word_pair):
    from tests.test_ui_handlers import request

    provider = serving.PairProvider(pair=word_pair)
    tab = session.Session()
    views = [list(run_panel.stream_run(provider, tab, request(provider, drafter=RECALL, k=2, max_new_tokens=6)))
             for _ in range(2)]
    assert views[1][-1].status.startswith("Done:") and "the toy remembers" in views[1][-1].status
    assert ("recalled" in _sources(tab.run.records)) is recall
    assert (RECALLED.label in views[1][-1].tokens) is recall  # the token view's words for the source
    assert "the toy remembers" in handlers.forget_runs(tab)[0] and tab.conversation.memory(RECALL).firsts == []


def test_a_lab_speed_trace_turn_holds_the_answers_before_it(recall, pair64):
    trace = TraceTurns({"a": ("prose", [1, 2, 3, 4], 6), "b": ("prose", [5, 6, 7, 8], 6)},
                       {"a": (), "b": ((9, 10, 11),)})
    make = lambda **options: make_proposer(pair64, RECALL, **options)  # as cli.lab.Job makes them
    request = SpeedRequest(pair64, {n: ids for n, (_, ids, _) in trace.prompts.items()}, make, ks=(2,), rounds=1,
                           max_new_tokens=6, plain_every=1, proposers={n: trace.factory(RECALL, make, n)
                                                                       for n in trace.prompts})
    runs = {r.prompt: r for r in speed(request).runs}
    assert "recalled" not in runs["a"].source_iterations
    assert ("recalled" in runs["b"].source_iterations) is recall


def test_a_replayed_arm_carries_a_drafters_memory_from_turn_to_turn(recall, pair64):
    turns = [greedy_turn(pair64, n, p, 6, "text") for n, p in (("t1", [1, 2, 3, 4]), ("t2", [5, 6, 7, 8]))]
    result = replay_turns(pair64, turns, ReplayOptions(drafters=[RECALL], ks=[2], controllers=()))
    assert result.drafters == [RECALL, RECALL + " (no cache)"]
    first, second = (t.drafters for t in result.turns)
    assert "recalled" not in first[RECALL].walks["k=2"].source_iterations
    assert ("recalled" in second[RECALL].walks["k=2"].source_iterations) is recall
    assert "recalled" not in second[RECALL + " (no cache)"].walks["k=2"].source_iterations

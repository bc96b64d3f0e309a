"""Replaying the suffix drafters: each arm's cache grows turn by turn in the file's order, so a walk is the live run
that had the same earlier turns, iteration by iteration; and an earlier turn is worth something."""

import pytest

from playground.core.engine import speculative_generate
from playground.core.records import Iteration
from playground.core.sampling import GREEDY, SamplingConfig
from playground.drafters.adaptive import CostCurve, make_controller
from playground.drafters.registry import make_proposer
from playground.drafters.suffix_cache import SuffixCache, suffix_tree_available
from playground.lab.replay import ReplayOptions, greedy_turn, replay_turns
from tests.test_replay import EOS, fake_timing
from tests.tiny import tiny_pair

OK, WHY = suffix_tree_available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY)
ARMS = [1, 3, 8, 16, "adaptive"]


@pytest.fixture(scope="module")
def pair(target64, drafts64):
    return tiny_pair(target64, drafts64["useful"], eos_ids=(EOS,))


@pytest.fixture(scope="module")
def turns(pair):
    # The third turn asks what the first did: with the first's answer cached, the tree drafts all of it.
    prompts = [[1, 2, 3, 4, 5, 1, 2, 3], [7, 8, 9, 7, 8], [1, 2, 3, 4, 5, 1, 2, 3], [40, 41, 1, 2, 3]]
    return [greedy_turn(pair, f"t{i}", p, 30, "text") for i, p in enumerate(prompts)]


def live_runs(pair, turns, drafter, arm, curve):
    """The live runs of the turns in order, one cache across them (as an agent's): their iterations per turn."""
    cache, out = SuffixCache(), []
    for turn in turns:
        proposer = make_proposer(pair, drafter, memory=cache)
        out.append([r for r in speculative_generate(pair, list(turn.prompt_ids), proposer=proposer,
                                                    k=make_controller(arm, curve, memory={}),
                                                    max_new_tokens=turn.max_new) if isinstance(r, Iteration)])
    return out


@pytest.mark.parametrize("drafter", ["suffix", "suffix-hybrid"])
def test_the_walk_is_the_live_run_with_the_same_history(pair, turns, drafter):
    timing = fake_timing()
    curve = CostCurve.from_timing(timing)
    doc = replay_turns(pair, turns, ReplayOptions(drafters=[drafter], ks=[a for a in ARMS if isinstance(a, int)],
                                                  controllers=["adaptive"], timing_of=lambda d, ids: timing,
                                                  feeding="live"))
    assert doc.errors == [] and all(t.exact for t in doc.turns)
    for arm in ARMS:
        label = f"k={arm}" if isinstance(arm, int) else arm
        for t, live in zip(doc.turns, live_runs(pair, turns, drafter, arm, curve)):
            simulated = t.drafters[drafter].walks[label].records
            assert [(it.k, it.n_accepted, it.emitted, (it.sources or [None])[0]) for it in live] == \
                [(r.k, r.n_accepted, tuple(r.emitted), (r.sources or [None])[0]) for r in simulated], \
                (t.name, label)
            for it, r in zip(live, simulated):  # the tree's proposals whole; a model's as far as they were decided
                n = len(r.proposed) if (it.sources or ["suffix"])[0] == "draft" else len(it.proposed)
                assert list(it.proposed[:n]) == list(r.proposed), (t.name, label)


def test_an_earlier_turn_makes_its_repeat_cheap(pair, turns):
    doc = replay_turns(pair, turns, ReplayOptions(drafters=["suffix"], ks=[16], controllers=[]))
    first, repeat = (doc.turns[i].drafters["suffix"].walks["k=16"] for i in (0, 2))
    assert repeat.tokens_per_pass > 2 * first.tokens_per_pass, (first, repeat)
    alone = replay_turns(pair, turns[2:3], ReplayOptions(drafters=["suffix"], ks=[16], controllers=[]))  # no history
    assert alone.turns[0].drafters["suffix"].walks["k=16"].tokens_per_pass == first.tokens_per_pass


def test_a_sampling_replay_says_the_suffix_drafters_are_greedy_only(pair, turns):
    doc = replay_turns(pair, turns[:1], ReplayOptions(
        drafters=["suffix"], ks=[2], sampling=SamplingConfig(do_sample=True, temperature=0.8, seed=1)))
    assert doc.turns == [] and "greedy decoding only" in doc.errors[0].message


def test_the_report_says_what_the_earlier_turns_were_worth(pair, turns):
    doc = replay_turns(pair, turns, ReplayOptions(drafters=["suffix", "lookup"], ks=[16], controllers=[],
                                                  timing_of=lambda d, ids: fake_timing()))
    assert doc.drafters == ["suffix", "suffix (no cache)", "lookup"]
    with_history, alone = (doc.turns[2].drafters[d].walks["k=16"] for d in doc.drafters[:2])
    assert with_history.tokens_per_pass > 2 * alone.tokens_per_pass  # the repeat of turn 0
    first = doc.turns[0].drafters
    assert first["suffix"].walks["k=16"].tokens_per_pass == \
        first["suffix (no cache)"].walks["k=16"].tokens_per_pass  # nothing earlier to remember
    overall = doc.summary.overall.drafters
    assert overall["suffix"].speedup["k=16"] > overall["suffix (no cache)"].speedup["k=16"]


def test_memory_stays_bounded_over_a_thousand_turn_replay(capsys):
    """1,000 turns walked through the suffix drafter over one cache, as replay walks a trace (the recorded text as
    the target's arg-max: no model runs); the process's RSS printed before and after."""
    import random

    import psutil

    from playground.core.engine import FixedK
    from playground.drafters.suffix import SuffixProposer
    from playground.lab.replay.walk import replay_context, walk

    rng, cache, rss = random.Random(0), SuffixCache(max_responses=64, max_tokens=8_000), psutil.Process().memory_info
    words = [[rng.randrange(2, 3000) for _ in range(rng.randrange(3, 12))] for _ in range(400)]  # "phrases"

    def text(n):
        return [t for _ in range(n) for t in rng.choice(words)]

    before, tokens = rss().rss, 0
    for turn in range(1000):
        prompt, completion = text(20), text(15)
        w = walk(prompt, completion, completion, SuffixProposer(cache), FixedK(8), len(completion),
                 replay_context(GREEDY, "cpu", ()))
        tokens += sum(len(it.emitted) for it in w.records)
        assert cache.responses <= 64 and cache.tokens <= 8_000
        if turn == 199:
            full = rss().rss  # the cache is full by now (64 responses of ~110 tokens > 8,000 tokens)
    after = rss().rss
    with capsys.disabled():
        print(f"\n1,000 turns, {tokens:,} tokens: RSS {before / 2**20:.1f} MiB before, {full / 2**20:.1f} MiB at "
              f"turn 200, {after / 2**20:.1f} MiB after; {cache.describe()}")
    assert after - full < 8 * 2**20  # no growth past a full cache beyond allocator noise


def test_the_replay_tab_offers_and_runs_the_suffix_drafter(tmp_path):
    """Through the Replay tab's handler, on a trace file: the suffix drafter and its cache-free row."""
    import json

    import torch

    from playground.limits import Limits
    from playground.pairs.models import ModelPair
    from playground.ui import replay_panel, replay_request, serving
    from tests.test_ui_handlers import WORDS
    from tests.tiny import tiny_model, word_tokenizer

    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    pair = ModelPair(target=target, tokenizer=word_tokenizer(WORDS), draft=target, eos_ids=frozenset({63}),
                     target_name="tiny-target", draft_name="tiny-draft")
    provider = serving.PairProvider(pair=pair)
    provider.calibrations.put(make_proposer(pair, "suffix").describe(), fake_timing())
    lines = []
    for i, prompt in enumerate(["w1 w2 w3", "w9 w8", "w1 w2 w3"]):
        turn = greedy_turn(pair, f"t{i}", pair.tokenizer(prompt)["input_ids"], 12, "text")
        lines.append(json.dumps({"id": f"t{i}", "prompt": prompt,
                                 "completion": " " + pair.tokenizer.decode(list(turn.completion_ids))}))
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    names = [name for _, name in replay_panel.drafter_choices(provider.drafter_choices())]
    assert {"suffix", "suffix-hybrid"} <= set(names)
    req = replay_request.parse_replay(
        {"source": "file", "trace_file": str(tmp_path / "t.jsonl"), "presets": [], "drafter": "suffix", "ks": "16",
         "controllers": [], "calibration": "once", "decoding": "greedy", "temperature": 1.0, "top_k": 0,
         "top_p": 1.0, "seed": 0, "min_confidence": 0.0}, names, Limits())
    doc = list(replay_panel.stream_replay(provider, None, None, req, Limits()))[-1].doc
    assert doc.drafters == ["suffix", "suffix (no cache)"] and len(doc.turns) == 3

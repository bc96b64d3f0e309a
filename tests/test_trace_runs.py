"""`speed --trace FILE`: a recorded trace's turns run live, each with the history an agent had by then (the
responses before it, in file order, never its own), so a suffix drafter's live run is the one replay predicts."""

import json

import pytest
import torch

from playground.cli import main
from playground.core.proposal import RunContext
from playground.core.sampling import GREEDY
from playground.drafters.suffix import SuffixProposer
from playground.drafters.suffix_cache import suffix_tree_available
from playground.errors import PlaygroundError
from playground.inputs.traces import Turn
from playground.lab.speed import SpeedRequest, speed
from playground.lab.speed.trace import TraceTurns, own_writing, trace_turns, writing_note
from playground.pairs.loading import load_pair
from tests.test_lab_cli import dirs  # noqa: F401  the tiny local pair, saved once per module
from tests.tiny import tiny_pair

OK, WHY = suffix_tree_available()
needs_tree = pytest.mark.skipif(not OK, reason=WHY)
# Three raw-text turns: the third is the first again, in a conversation of its own (its prompt does not quote it).
LINES = [{"id": "a", "prompt": "w1 w2", "completion": "w5 w6 w7 w8 w9 w10 w11 w12"},
         {"id": "b", "prompt": "w3 w4", "completion": "w20 w21 w22"},
         {"id": "c", "prompt": "w2 w1", "completion": "w5 w6 w7 w8 w9 w10 w11 w12"}]


@pytest.fixture(scope="module")
def pair(dirs):  # noqa: F811
    return load_pair(dirs[0], None, device="cpu", dtype="float32", progress=None)


def write(tmp_path, lines) -> str:
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


@needs_tree
def test_each_turn_holds_the_responses_before_it_and_not_its_own(pair, tmp_path):
    trace = trace_turns(pair, write(tmp_path, LINES))
    assert list(trace.prompts) == ["a", "b", "c"]
    ids = {x["id"]: pair.tokenizer(x["completion"])["input_ids"] for x in LINES}
    assert [list(map(list, trace.earlier[n])) for n in "abc"] == [[], [ids["a"]], [ids["a"], ids["b"]]]
    assert [trace.conversation(n, "suffix").memory("suffix").responses for n in "abc"] == [0, 1, 2]
    # The history is worth something: after c's first token, the tree drafts how a's answer went on (4 x the
    # 1-token match); with a's own (empty) history it has nothing to draft from.
    ctx = RunContext(GREEDY, GREEDY.generator("cpu"), pair.eos_ids)
    answer = ids["c"]
    for name, expect in (("c", answer[1:5]), ("a", [])):
        drafter = SuffixProposer(trace.conversation(name, "suffix").memory("suffix"))
        prompt = trace.prompts["c"][1]
        drafter.begin(prompt, ctx)
        assert list(drafter.propose([*prompt, answer[0]], 7).tokens) == expect, name
    # a new cache per call: a run adds its answer to its own cache, never to the next run's
    used = trace.conversation("b", "suffix").memory("suffix")
    used.add_response([1], ids["b"])
    assert used.responses == 2 and trace.conversation("b", "suffix").memory("suffix").responses == 1


@needs_tree
def test_the_turns_chosen_by_shape_and_count_keep_the_whole_history(pair, tmp_path):
    path = write(tmp_path, LINES)
    last = trace_turns(pair, path, last=1)
    assert list(last.prompts) == ["c"] and len(last.earlier["c"]) == 2  # b is not run, but the agent wrote it
    shape, prompt, max_new = last.prompts["c"]
    assert shape in ("prose", "copied") and max_new == len(last.earlier["c"][0])
    assert prompt == pair.tokenizer("w2 w1")["input_ids"]


def _greedy(pair, prompt: list[int], n: int) -> list[int]:
    """The target's greedy continuation, one full forward per token (no cache: nothing the check itself uses)."""
    ids = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            ids.append(int(pair.target(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def test_own_writing_finds_where_a_recording_leaves_the_targets_greedy_output(pair):
    prompt = pair.tokenizer("w1 w2 w3")["input_ids"]
    own = _greedy(pair, prompt, 8)
    edited = [*own[:3], (own[3] + 1) % pair.vocab_size, *own[4:]]  # another writer from token 3 on
    turns = {"own": Turn("own", tuple(prompt), tuple(own)), "edited": Turn("edited", tuple(prompt), tuple(edited))}
    trace = TraceTurns({n: ("prose", prompt, 8) for n in turns}, {n: () for n in turns}, turns=turns)
    assert own_writing(pair, trace, chunk=3) == {"own": None, "edited": 3}


def test_the_note_says_how_many_turns_are_the_targets_and_warns_when_most_are_not():
    half = writing_note({"a": None, "b": 3})
    assert half == ("1 of 2 turns run are the target's own greedy writing; the recording differs from what it "
                    "writes in the others (b from token 3)")
    most = writing_note({"a": None, "b": 3, "c": 0, "d": 9, "e": 1})
    assert most.startswith("1 of 5 turns") and "(c from token 0, e from token 1, b from token 3, ...)" in most
    assert "another writer's" in most and "scripts/make_trace.py" in most
    assert writing_note({"a": None}) == "1 of 1 turns run are the target's own greedy writing"


def test_bad_trace_selections_say_what_is_wrong(pair, tmp_path):
    path = write(tmp_path, LINES)
    with pytest.raises(PlaygroundError, match=r"no turn of trace.jsonl has 4 or more tokens of json .*prose"):
        trace_turns(pair, path, "json")
    with pytest.raises(PlaygroundError, match="unknown output shape 'xml'"):
        trace_turns(pair, path, "xml")
    with pytest.raises(PlaygroundError, match="--turns must be >= 1"):
        trace_turns(pair, path, last=0)
    with pytest.raises(PlaygroundError, match="names two turns alike"):
        trace_turns(pair, write(tmp_path, [LINES[0], LINES[0]]))
    with pytest.raises(PlaygroundError, match="no turn to run .*not valid JSON"):
        trace_turns(pair, _broken(tmp_path))
    with pytest.raises(PlaygroundError, match="no trace file"):
        trace_turns(pair, str(tmp_path / "missing.jsonl"))


def _broken(tmp_path) -> str:
    path = tmp_path / "broken.jsonl"
    path.write_text("{not json\n")
    return str(path)


def test_speed_runs_a_prompt_with_its_own_proposers_and_the_rest_with_the_default(target64, drafts64):
    from playground.drafters.proposers import PromptLookupProposer

    made = []

    def factory(tag):
        def make():
            made.append(tag)
            return PromptLookupProposer()
        return make

    pair = tiny_pair(target64, drafts64["useful"])
    request = SpeedRequest(pair, {"x": [1, 2, 3, 1, 2], "y": [4, 5, 4, 5]}, factory("default"), ks=(2,), rounds=2,
                           max_new_tokens=4, plain_every=1, proposers={"x": factory("x")})
    result = speed(request)
    assert sorted(made) == ["default", "default", "x", "x"] and {r.prompt for r in result.runs} == {"x", "y"}


@needs_tree
def test_speed_trace_end_to_end_and_its_bad_arguments(dirs, tmp_path, capsys):  # noqa: F811
    path, out = write(tmp_path, LINES), tmp_path / "speed.json"
    base = ["speed", "--target", dirs[0], "--draft", "none", "--device", "cpu", "--drafter", "suffix"]
    assert main([*base, "--trace", path, "--turns", "2", "--ks", "4", "--rounds", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["prompts"] == ["b", "c"] and doc["max_new_tokens"] == {"b": 3, "c": 8}  # each its recorded length
    # the random tiny target writes none of these answers: the result says so, and why it matters
    assert doc["trace_note"].startswith("0 of 2 turns run are the target's own") and "another writer's" in doc["trace_note"]
    captured = capsys.readouterr()
    assert "2 turns of" in captured.err and f"trace: {doc['trace_note']}" in captured.out
    assert main([*base, "--trace", path, "--preset", "chat"]) == 2
    assert "leave out --preset, --prompt and --max-new-tokens" in capsys.readouterr().err
    assert main([*base, "--prompt", "w1", "--turns", "2"]) == 2
    assert "choose among the turns of a --trace FILE" in capsys.readouterr().err
    assert main([*base, "--trace", path, "--shape", "code"]) == 2
    assert "no turn of trace.jsonl has 4 or more tokens of code" in capsys.readouterr().err


def test_the_parser_spells_out_the_shapes():
    from playground.cli.entry import build_parser
    from playground.lab.shapes import SHAPES

    speed_parser = build_parser()._subparsers._group_actions[0].choices["speed"]
    shape = next(a for a in speed_parser._actions if a.dest == "shape")
    assert tuple(shape.choices) == SHAPES


def test_a_figure_over_several_prompts_is_judged_by_its_rounds_not_by_how_the_prompts_differ():
    from playground.lab.speed.cells import judge
    from playground.results.speed import SpeedRow, SpeedRun
    from playground.results.trust import Verdict

    def verdict(ratios_by_round, prompt=None):
        runs = [SpeedRun(round=r, prompt=p, k=4, ratio=x) for r, row in enumerate(ratios_by_round)
                for p, x in zip("ab", row)]
        mine = [x for x in runs if prompt in (None, x.prompt)]
        row = SpeedRow(prompt=prompt, k=4, median_ratio=0.0, min_ratio=min(x.ratio for x in mine),
                       max_ratio=max(x.ratio for x in mine))
        judge(row, mine, Verdict())
        return [f.message for f in row.trust.findings if f.check == "spread"]

    steady = [(2.0, 10.0), (2.1, 10.2), (1.9, 9.9)]  # a tool call against prose, the same in every round
    assert verdict(steady) == [] and verdict(steady, "a") == []
    moving = [(2.0, 10.0), (4.0, 20.0), (1.0, 5.0)]  # the host's speed moved the whole round
    assert verdict(moving) and "its rounds spread" in verdict(moving)[0] and verdict(moving, "b")

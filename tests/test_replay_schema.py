"""What a turn's schema is worth in a replay (playground.lab.replay.schema): the forced share of a recorded tool
call, walked as the schema+ drafters propose; a recording that leaves its schema named, not counted; the
constrained walks of a greedy replay equal live constrained runs (schema+lookup, schema+draft; fixed k and the
heuristic), pooled per shape beside the free walks; the table and the saved result keep them. A tiny random model
whose vocabulary is the embedded tokenizer's."""

from __future__ import annotations

import copy

import pytest

from playground.constraints.grammar import Grammar
from playground.constraints.schema import Schema
from playground.core.engine import LoopOptions, plain_generate, speculative_generate
from playground.core.records import FORCED, summarize
from playground.drafters.adaptive import make_controller
from playground.drafters.registry import make_proposer
from playground.inputs.presets import get_preset
from playground.inputs.traces import Turn
from playground.lab.replay import ReplayOptions, replay_table, replay_turns
from playground.lab.replay.schema import forced_positions, schema_worth
from playground.results import load_result
from playground.results.replay import TurnShapes
from tests.schema_models import bounded, embedded_tokenizer, tiny_schema_pair
from tests.tiny import tokens

TOOL_CALL = get_preset("tool_call").output_schema
CALL = '{"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}'
NEW = 40


@pytest.fixture(scope="module")
def tokenizer():
    return embedded_tokenizer()


@pytest.fixture(scope="module")
def grammar(tokenizer):
    return Grammar(Schema(TOOL_CALL, "the tools"), tokenizer)


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_a_tool_calls_forced_tokens_are_all_but_its_choices_and_values(tokenizer, grammar):
    out = ids(tokenizer, CALL)
    forced, note = forced_positions(grammar, ids(tokenizer, "Call a tool."), out)
    assert note is None
    free = [tokenizer.decode([out[t]]) for t in range(len(out)) if t not in forced]
    # which tool, where a free string opens (llguidance's boundary rule), its text and its end, which enum value
    assert free == ["get", ' "', "Paris", '",', "c"]
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    shapes = TurnShapes([(0, 5, "json"), (5, len(out) + 1, "prose")], {})
    worth = schema_worth(grammar, ids(tokenizer, "Call a tool."), [*out, eos], [eos], shapes)
    # the end-of-sequence token is no output the grammar holds: a constrained run ends before it
    assert (worth.tokens, worth.forced) == (len(out), len(out) - 5) and worth.forced_share == (len(out) - 5) / len(out)
    first = sum(1 for t in forced if t < 5)
    assert worth.shapes == {"json": [5, first], "prose": [len(out) - 5, len(out) - 5 - first]}


@pytest.mark.parametrize("text, words", [
    ('{"name": "get_weather", "arguments": {"location": "Paris", "unit": "kelvin"}}', "leaves the tools at token"),
    ('{"name": "get_weather", "arguments": {"location": "Paris"', "stops before the tools is complete"),
])
def test_a_recording_that_does_not_keep_to_its_schema_has_no_share_and_says_why(tokenizer, grammar, text, words):
    out = ids(tokenizer, text)
    worth = schema_worth(grammar, [1, 2], out, [], TurnShapes([], {}))
    assert worth.forced_share is None and words in worth.note
    if "kelvin" in text:  # the first token past "unit": " is the one refused
        at = len(ids(tokenizer, text.split("kelvin")[0]))
        assert f"at token {at} of {len(out)}" in worth.note


@pytest.fixture(scope="module")
def pair(tokenizer):
    return tiny_schema_pair(tokenizer, keep_tokenizer=True)


@pytest.fixture(scope="module")
def replayed(pair, tokenizer):
    """A turn whose recording is the tiny target's constrained greedy output on the tool_call preset (bounded so a
    random model completes it), ended by <|im_end|> as a trace records it; replayed with lookup and the draft."""
    schema = bounded(TOOL_CALL)
    grammar = Grammar(Schema(schema, "bounded tools"), tokenizer)
    prompt = get_preset("tool_call").prompt_ids(tokenizer)
    out = tokens(plain_generate(pair, prompt, max_new_tokens=NEW, constraint=grammar))
    eos = min(pair.eos_ids)
    turn = Turn("call", tuple(prompt), (*out, eos), max_new_tokens=NEW, schema=schema, schema_name="bounded tools")
    result = replay_turns(pair, [turn], ReplayOptions(drafters=["lookup", "draft"], ks=[1, 3, 8],
                                                      controllers=("heuristic", "adaptive"), feeding="live"))
    return grammar, prompt, out, result


@pytest.mark.parametrize("drafter", ["lookup", "draft"])
@pytest.mark.parametrize("arm", [1, 3, 8, "heuristic"])
def test_a_constrained_walk_is_the_live_constrained_run(pair, replayed, drafter, arm):
    grammar, prompt, out, result = replayed
    turn = result.turns[0]
    assert turn.schema_worth.exact and turn.schema_worth.note is None and turn.schema_worth.tokens == len(out)
    live = list(speculative_generate(pair, prompt, proposer=make_proposer(pair, f"schema+{drafter}"),
                                     k=make_controller(arm, None, memory={}), max_new_tokens=NEW,
                                     options=LoopOptions(constraint=grammar)))
    s = summarize(live)
    assert tokens(live) == out and s.finished == "schema"
    walked = turn.drafters[drafter].constrained[f"k={arm}" if isinstance(arm, int) else arm]
    assert (walked.iterations, walked.new_tokens, walked.forced, walked.finished) == \
        (s.target_passes, s.new_tokens, s.roles.get(FORCED, 0), "schema")
    assert walked.drafter == f"schema+{drafter}" and walked.forced > 0
    free = turn.drafters[drafter].walks[walked.arm]
    assert free.new_tokens == len(out) + 1  # the free walk spends a pass on <|im_end|>; the constrained one does not


def test_the_constrained_walks_pool_per_shape_and_show_in_the_table(replayed, tmp_path):
    _, _, out, result = replayed
    turn = result.turns[0]
    assert turn.drafters["lookup"].constrained["adaptive"].skipped  # no calibration: adaptive k is not walked
    overall = result.summary.overall.schema
    assert (overall.turns, overall.tokens, overall.forced) == (1, len(out), turn.schema_worth.forced)
    cell = overall.drafters["lookup"]["k=3"]
    walked, free = turn.drafters["lookup"].constrained["k=3"], turn.drafters["lookup"].walks["k=3"]
    assert cell.constrained == walked.tokens_per_pass and cell.free == free.tokens_per_pass
    assert cell.speedup is None  # no calibration, no predicted speed-up
    table = replay_table(result)
    assert f"forced by the schema: {overall.forced} of {overall.tokens} tokens" in table
    row = next(line for line in table.splitlines()[::-1] if line.startswith("| lookup | ") and " / " in line)
    assert row.split(" | ")[2] == f"{free.tokens_per_pass:.2f} / {walked.tokens_per_pass:.2f}"  # the k=3 column
    path = tmp_path / "r.json"
    result.save(path)
    again = load_result(path)
    assert again.turns[0].schema_worth == turn.schema_worth and again.summary.overall.schema == overall
    assert again.turns[0].drafters["lookup"].constrained["k=3"] == walked


def test_the_replay_tabs_k_per_shape_table_shows_the_schemas_worth_for_the_chosen_drafter(replayed):
    from playground.ui.replay_view import replay_per_k_html  # the Replay tab's content, no gradio

    result = replayed[3]
    s = result.summary.overall.schema
    tables = {d: replay_per_k_html(result, d).split('data-table="replay-schema"')[1] for d in ("lookup", "draft")}
    assert f"<td>{s.forced} of {s.tokens} ({s.forced_share:.0%})</td>" in tables["lookup"]
    for d, table in tables.items():
        cell = s.drafters[d]["k=3"]
        row = table.split('data-arm="k=3"')[1].split("</tr>")[0]
        assert row.endswith(f"<td>{cell.free:.2f} / {cell.constrained:.2f}</td>")  # the all-tokens column, last
    assert tables["lookup"] != tables["draft"]
    none = copy.deepcopy(result)
    for shape in [*none.summary.shapes.values(), none.summary.overall]:
        shape.schema = None
    assert "replay-schema" not in replay_per_k_html(none, "lookup")


def test_the_exact_count_and_a_sampling_replay_gives_the_share_without_constrained_walks(pair, replayed):
    from playground.core.sampling import SamplingConfig

    _, prompt, out, result = replayed
    assert result.summary.overall.schema.exact_turns == 1
    assert "turns with a schema: 1 (1 the masked target's greedy output" in replay_table(result)
    turn = Turn("call", tuple(prompt), (*out, min(pair.eos_ids)), schema=bounded(TOOL_CALL), schema_name="bounded tools")
    sampled = replay_turns(pair, [turn], ReplayOptions(drafters=["lookup"], ks=[2],
                                                       sampling=SamplingConfig(do_sample=True, temperature=0.8)))
    worth = sampled.turns[0].schema_worth
    assert worth.forced == result.turns[0].schema_worth.forced and worth.exact is None  # the share; no walks
    assert getattr(sampled.turns[0].drafters["lookup"], "constrained", None) is None


def test_a_schema_llguidance_cannot_compile_is_a_note_not_a_failed_turn(pair, tokenizer):
    schema = {"anyOf": [{"type": "object", "properties": {"name": {"const": "f"}},
                         "if": {"required": ["name"]}, "then": {"required": ["name"]}}]}
    out = ids(tokenizer, '{"name": "f"}')
    result = replay_turns(pair, [Turn("call", (1, 2, 3), tuple(out), schema=schema, schema_name="the tools of line 1")],
                          ReplayOptions(drafters=["lookup"], ks=[1], controllers=()))
    assert not result.errors
    worth = result.turns[0].schema_worth
    assert worth.forced_share is None and worth.note.startswith("the tools of line 1 cannot be compiled")
    assert result.turns[0].drafters["lookup"].constrained is None and result.summary.overall.schema is None

"""Reading trace files for replay (playground.inputs.traces): the sample file, tool calls as text, and bad lines
named by line and field while the rest of the file is still read. Real tokenizer, no model."""

import json

import pytest

from playground.inputs.traces import SAMPLE_TRACE, read_trace, render_messages
from playground.limits import Limits


@pytest.fixture(scope="module")
def tokenizer():
    from playground.pairs.loading import ensure_embedded_safetensors, load_tokenizer

    return load_tokenizer(ensure_embedded_safetensors(progress=lambda *a: None))


@pytest.fixture(scope="module")
def eos(tokenizer):
    return [tokenizer.convert_tokens_to_ids("<|im_end|>")]


def test_the_sample_trace_reads_whole(tokenizer, eos):
    trace = read_trace(SAMPLE_TRACE, tokenizer, eos)
    assert trace.errors == [] and trace.lines == 8 and len(trace.turns) == 25
    assert len({t.conversation for t in trace.turns}) == 8
    first = trace.turns[0]
    assert first.name == "weather turn 1" and first.origin == "trace" and first.max_new == len(first.completion_ids)
    text = tokenizer.decode(first.completion_ids)
    assert text == '{"name": "get_weather", "arguments": {"city": "Lisbon", "unit": "celsius"}}<|im_end|>'
    for t in trace.turns:  # every completion ends at the template's end-of-turn token, the prompt at "assistant\n"
        assert t.completion_ids[-1] == eos[0] and tokenizer.decode(t.prompt_ids).endswith("<|im_start|>assistant\n")


def test_smollm2s_template_ignores_tool_calls_so_they_are_rendered_as_json_text(tokenizer):
    call = {"role": "assistant", "content": "Let me check.",
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}
    shown = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}, call], tokenize=False)
    assert "f" not in shown.split("Let me check.")[1].split("<|im_end|>")[0]  # the template drops the call
    rendered = render_messages([{"role": "user", "content": "hi"}, call])
    assert rendered[1] == {"role": "assistant", "content": 'Let me check.\n{"name": "f", "arguments": {"x": 1}}'}
    broken = {"role": "assistant", "content": None,
              "tool_calls": [{"function": {"name": "g", "arguments": "{not json"}}]}
    assert render_messages([{"role": "user", "content": "hi"}, broken])[1]["content"] == \
        '{"name": "g", "arguments": "{not json"}'


def test_a_lines_context_messages_are_prompt_not_turns(tmp_path, tokenizer, eos):
    shot = [{"role": "system", "content": "Reply with JSON."}, {"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": '{"name": "get_weather"}'}]
    live = [{"role": "user", "content": "Weather in Rome?"}, {"role": "assistant", "content": '{"name": "w"}'}]
    lines = [{"id": "a", "context": 3, "messages": shot + live}, {"id": "b", "messages": shot + live},
             {"id": "c", "context": 3, "messages": shot}, {"id": "d", "context": 9, "messages": shot},
             {"id": "e", "context": "3", "messages": shot + live}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    trace = read_trace(path, tokenizer, eos)
    assert [t.name for t in trace.turns] == ["a", "b turn 1", "b turn 2"]  # the example is no turn of a
    assert trace.turns[0].prompt_ids == trace.turns[2].prompt_ids  # but it is still in the prompt
    assert [(e.line, e.field) for e in trace.errors] == [(3, "messages"), (4, "context"), (5, "context")]


def test_bad_lines_are_named_and_the_rest_is_read(tmp_path, tokenizer, eos):
    good = {"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi!"}]}
    lines = [
        json.dumps(good),
        "{not json",
        "[1, 2]",
        json.dumps({"messages": [{"role": "robot", "content": "x"}]}),
        json.dumps({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": None}]}),
        json.dumps({"messages": [{"role": "user", "content": "x"},
                                 {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]}),
        json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]},
                                 {"role": "assistant", "content": "ok"}]}),
        json.dumps({"prompt": "2 + 2 =", "completion": ""}),
        json.dumps({"messages": [{"role": "user", "content": "only a question"}]}),
        json.dumps({"text": "neither"}),
        "",
        json.dumps({"prompt": "Count: one, two,", "completion": " three, four"}),
    ]
    path = tmp_path / "t.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode() + b'{"prompt": "caf\xe9"}\n')
    trace = read_trace(path, tokenizer, eos)
    got = [(e.line, e.field) for e in trace.errors]
    assert got == [(2, "(line)"), (3, "(line)"), (4, "messages[0].role"), (5, "messages[1].content"),
                   (6, "messages[1].tool_calls[0].function.name"), (7, "messages[0].content[0]"),
                   (8, "completion"), (9, "messages"), (10, "messages"), (13, "(line)")]
    messages = {e.line: str(e) for e in trace.errors}
    assert "not valid JSON" in messages[2] and "'robot' is not one of" in messages[4]
    assert "needs content or tool_calls" in messages[5] and "not UTF-8" in messages[13]
    assert [t.name for t in trace.turns] == [f"{path.name}:1", f"{path.name}:12"]
    raw = trace.turns[1]
    assert tokenizer.decode(raw.completion_ids) == " three, four"


def test_the_replay_limits_bound_lines_turns_and_tokens(tmp_path, tokenizer, eos):
    conv = {"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi!"},
                         {"role": "user", "content": "Again."}, {"role": "assistant", "content": "Hi again!"}]}
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(conv) + "\n" + json.dumps(conv) + "\n" + json.dumps({"prompt": "x" * 5000,
                                                                                    "completion": "y"}) + "\n")
    # turns are 33 + 3 and 48 + 4 tokens: 60 lets both through, 3 turns at most, lines of at most 64 x 60 bytes
    trace = read_trace(path, tokenizer, eos, Limits(max_replay_turns=3, max_replay_tokens=60))
    assert [t.name for t in trace.turns] == [f"{path.name}:1 turn 1", f"{path.name}:1 turn 2", f"{path.name}:2 turn 1"]
    assert trace.skipped_turns == 1
    errors = [str(e) for e in trace.errors]
    assert errors[0].startswith("line 3: field '(line)': longer than 3840 bytes")
    assert errors[1] == "line 3: field '(file)': 1 turns past the first 3 were skipped (PLAYGROUND_MAX_REPLAY_TURNS)"
    trace = read_trace(path, tokenizer, eos, Limits(max_replay_tokens=40))
    assert [t.name for t in trace.turns] == [f"{path.name}:1 turn 1", f"{path.name}:2 turn 1"]
    assert str(trace.errors[0]) == ("line 1: field 'messages[3]': the turn is 48 prompt + 4 completion tokens; a "
                                    "replay takes at most 40 per turn (PLAYGROUND_MAX_REPLAY_TOKENS)")
    limits = Limits.from_env({"PLAYGROUND_MAX_REPLAY_TURNS": "7", "PLAYGROUND_REPLAY_CHUNK_TOKENS": "32"})
    assert limits.max_replay_turns == 7 and limits.replay_chunk_tokens == 32 and limits.max_replay_tokens == 8192

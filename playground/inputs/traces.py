"""Recorded agent outputs as replay turns: a JSONL trace file, read line by line (the format: docs/replay.md).

Each line is one JSON object, either a conversation in the OpenAI chat format or one raw prompt and its completion:

    {"id": "...", "messages": [{"role": "system" | "user" | "assistant" | "tool", "content": ...}, ...]}
    {"id": "...", "prompt": "text the model saw", "completion": "text it wrote"}

Every assistant message after the first message (and after the optional `context` first messages: an agent's system
prompt and few-shot examples) is a turn: its prompt is the conversation before it, rendered by the tokenizer's chat
template with the generation prompt; its completion is what the template renders for the message itself, up to and
including the first end-of-sequence token. An assistant's `tool_calls` are rendered into its text, one
`{"name": NAME, "arguments": {...}}` object per line after the content, because SmolLM2's template (and any that
reads only `content`) ignores them and fails on a null content. `tools` (OpenAI's function tools) gives the schema
a turn that is one tool call carries (tools.py, `Turn.schema`). A raw {"prompt", "completion"} line is tokenized
as is (special tokens parsed; no chat template).

A bad line is a `TraceError` naming the line and the field; the rest of the file is still read. The replay limits
(playground.limits) bound a line's length, a turn's tokens and the number of turns. No model is loaded here: a
tokenizer is passed in.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PlaygroundError
from ..limits import Limits
from .tools import ToolsError, is_one_call, tools_schema

ROLES = ("system", "user", "assistant", "tool")
# Agent-style conversations written for this project (tool calls and their results, ReAct, JSON, code, quotes).
SAMPLE_TRACE = Path(__file__).resolve().parents[1] / "traces" / "agent_sample.jsonl"


@dataclass(frozen=True)
class Turn:
    """One recorded completion to replay: the prompt the model saw and the tokens it wrote.

    origin: "trace" (a file), "preset" or "text" (the completion is the target's own greedy output).
    conversation: turns of one conversation share it; a replayed controller's memory carries across them, as
    it would from one call of an agent to the next. max_new_tokens: the run's length limit (default: the
    completion's length); larger only for a completion that ends with an end-of-sequence token. schema: the JSON
    schema its whole output is held to (a tool-call turn of a line with `tools`), named `schema_name`."""

    name: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    origin: str = "trace"
    conversation: str = ""
    max_new_tokens: int | None = None
    kind: str | None = None
    schema: dict | None = field(default=None, compare=False)
    schema_name: str | None = None

    @property
    def max_new(self) -> int:
        return self.max_new_tokens or len(self.completion_ids)

    def to_dict(self) -> dict:
        return {"name": self.name, "origin": self.origin, "conversation": self.conversation, "kind": self.kind,
                "prompt_tokens": len(self.prompt_ids), "completion_tokens": len(self.completion_ids),
                "max_new_tokens": self.max_new, "schema": self.schema_name}


@dataclass(frozen=True)
class TraceError:
    """A line (or one turn of it) that could not be replayed, and why."""

    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: field '{self.field}': {self.message}"

    def to_dict(self) -> dict:
        return {"line": self.line, "field": self.field, "message": self.message}


class _Bad(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


# --- the chat messages -------------------------------------------------------------------------------------


def _text_of(content, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise _Bad(f"{where}[{j}]", 'a content part must be {"type": "text", "text": "..."} (only text replays)')
            parts.append(part["text"])
        return "".join(parts)
    raise _Bad(where, f"content must be a string, null or a list of text parts, not {type(content).__name__}")


def render_tool_call(call, where: str) -> str:
    """One tool call as the JSON text an agent emits: {"name": ..., "arguments": {...}}."""
    if not isinstance(call, dict):
        raise _Bad(where, f"a tool call is an object, not {type(call).__name__}")
    fn = call.get("function")
    if not isinstance(fn, dict):
        raise _Bad(f"{where}.function", "missing (a tool call needs a function with a name and arguments)")
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise _Bad(f"{where}.function.name", "missing or not a string")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            pass  # an agent that wrote broken arguments: replay them as the string it wrote
    return json.dumps({"name": name, "arguments": args}, ensure_ascii=False)


def render_messages(messages) -> list[dict]:
    """The messages as {"role", "content"} pairs a chat template renders, tool calls written into the text."""
    if not isinstance(messages, list) or not messages:
        raise _Bad("messages", "must be a non-empty list of messages")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _Bad(where, f"a message is an object, not {type(m).__name__}")
        role = m.get("role")
        if role not in ROLES:
            raise _Bad(f"{where}.role", f"{role!r} is not one of {', '.join(ROLES)}")
        if "content" not in m and role != "assistant":
            raise _Bad(f"{where}.content", "missing")
        text = _text_of(m.get("content"), f"{where}.content")
        calls = m.get("tool_calls")
        if calls is not None:
            if role != "assistant":
                raise _Bad(f"{where}.tool_calls", "only an assistant message makes tool calls")
            if not isinstance(calls, list):
                raise _Bad(f"{where}.tool_calls", "must be a list")
            rendered = [render_tool_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
            text = "\n".join(([text] if text else []) + rendered)
        if role == "assistant" and not text:
            raise _Bad(f"{where}.content", "an assistant message needs content or tool_calls")
        out.append({"role": role, "content": text})
    return out


def _ids(encoded) -> list[int]:
    """Token ids from what apply_chat_template / a tokenizer call returns (a list, a BatchEncoding, a tensor)."""
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    if hasattr(encoded, "tolist"):
        encoded = encoded.tolist()
    if encoded and isinstance(encoded[0], (list, tuple)):
        encoded = encoded[0]
    return [int(t) for t in encoded]


def _cut_at_stop(ids: Sequence[int], stop_ids: Iterable[int]) -> list[int]:
    stops = set(stop_ids)
    for i, t in enumerate(ids):
        if t in stops:
            return list(ids[: i + 1])
    return list(ids)


def chat_turns(messages: list[dict], tokenizer, stop_ids: Iterable[int]) -> Iterator[tuple[int, list[int], list[int]]]:
    """(message index, prompt ids, completion ids) for every assistant message after the first message."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise _Bad("messages", "this tokenizer has no chat template; give raw {\"prompt\", \"completion\"} lines")
    stops = list(stop_ids)
    for i, m in enumerate(messages):
        if m["role"] != "assistant" or i == 0:
            continue
        prompt = _ids(tokenizer.apply_chat_template(messages[:i], add_generation_prompt=True, tokenize=True,
                                                    return_dict=False))
        full = _ids(tokenizer.apply_chat_template(messages[: i + 1], tokenize=True, return_dict=False))
        if full[: len(prompt)] != prompt:
            raise _Bad(f"messages[{i}]", "the chat template does not render the conversation before this message "
                                         "as a prefix of the conversation with it; this turn cannot be split")
        yield i, prompt, _cut_at_stop(full[len(prompt):], stops)


def raw_turn(prompt: str, completion: str, tokenizer, stop_ids: Iterable[int]) -> tuple[list[int], list[int]]:
    """Prompt and completion ids of a raw line: the completion as the continuation of the prompt's text when the
    tokenizer splits the joined text at the same place, else tokenized on its own."""
    p = _ids(tokenizer(prompt)["input_ids"])
    full = _ids(tokenizer(prompt + completion)["input_ids"])
    if full[: len(p)] == p and len(full) > len(p):
        c = full[len(p):]
    else:
        c = _ids(tokenizer(completion, add_special_tokens=False)["input_ids"])
    return p, _cut_at_stop(c, stop_ids)


# --- the file --------------------------------------------------------------------------------------------


@dataclass
class Trace:
    turns: list[Turn]
    errors: list[TraceError]
    lines: int = 0
    skipped_turns: int = 0  # turns past the turn limit


def _lines(path: Path, max_bytes: int) -> Iterator[tuple[int, str | None, str | None, int]]:
    """(line number, text, None, bytes read so far) per line, or (line number, None, why, bytes) for a line that is
    too long or not UTF-8; reads at most `max_bytes` + 1 of a line at a time, so memory stays bounded."""
    with open(path, "rb") as f:
        number = 0
        while True:
            raw = f.readline(max_bytes + 1)
            if not raw:
                return
            number += 1
            if len(raw) > max_bytes and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):  # skip the rest of this line
                    raw = f.readline(max_bytes + 1)
                yield number, None, f"longer than {max_bytes} bytes (PLAYGROUND_MAX_REPLAY_TOKENS x 64)", f.tell()
                continue
            try:
                yield number, raw.decode("utf-8"), None, f.tell()
            except UnicodeDecodeError as e:
                yield number, None, f"not UTF-8 text: the byte 0x{raw[e.start]:02x} at offset {e.start}", f.tell()


def read_trace(path: str | Path, tokenizer, stop_ids: Iterable[int] = (), limits: Limits | None = None,
               max_context: int | None = None, progress: Callable[[float, str], None] | None = None) -> Trace:
    """The turns of a JSONL trace file and the errors of its bad lines (see the module docstring); `progress`
    (optional) hears the share of the file read and the line being read, before each line."""
    limits = limits or Limits()
    path = Path(path)
    stops = list(stop_ids) or [t for t in (getattr(tokenizer, "eos_token_id", None),) if t is not None]
    if not path.is_file():
        raise PlaygroundError(f"no trace file at {str(path)!r}")
    trace, size = Trace([], []), max(1, path.stat().st_size)
    for number, text, why, read in _lines(path, limits.max_trace_line_bytes):
        if progress is not None:
            progress(read / size, f"line {number} of {path.name}")
        trace.lines = number
        if why is not None:
            trace.errors.append(TraceError(number, "(line)", why))
            continue
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            trace.errors.append(TraceError(number, "(line)", f"not valid JSON: {e.msg} (column {e.colno})"))
            continue
        for turn_or_error in _line_turns(obj, number, path.name, tokenizer, stops, limits, max_context):
            if isinstance(turn_or_error, TraceError):
                trace.errors.append(turn_or_error)
            elif len(trace.turns) >= limits.max_replay_turns:
                trace.skipped_turns += 1
            else:
                trace.turns.append(turn_or_error)
    if trace.skipped_turns:
        trace.errors.append(TraceError(trace.lines, "(file)", f"{trace.skipped_turns} turns past the first "
                                       f"{limits.max_replay_turns} were skipped (PLAYGROUND_MAX_REPLAY_TURNS)"))
    return trace


def _line_turns(obj, number: int, source: str, tokenizer, stops, limits: Limits, max_context) -> Iterator:
    if not isinstance(obj, dict):
        yield TraceError(number, "(line)", f"a line holds one JSON object, not {type(obj).__name__}")
        return
    conv = obj.get("id") if isinstance(obj.get("id"), str) and obj.get("id") else f"{source}:{number}"
    try:
        if "messages" in obj:
            messages = render_messages(obj["messages"])
            context = obj.get("context", 0)
            if isinstance(context, bool) or not isinstance(context, int) or not 0 <= context <= len(messages):
                raise _Bad("context", f"the number of leading messages that are not turns, 0 to {len(messages)}")
            schema = tools_schema(obj["tools"]) if obj.get("tools") is not None else None
            held = {i for i, m in enumerate(obj["messages"]) if schema is not None and is_one_call(m)}
            pieces = [(f"messages[{i}]", p, c, i in held) for i, p, c in chat_turns(messages, tokenizer, stops)
                      if i >= context]
            if not pieces:
                raise _Bad("messages", "no assistant message after the first message (and the context): nothing "
                                       "to replay")
        elif "prompt" in obj or "completion" in obj:
            for name in ("prompt", "completion"):
                if not isinstance(obj.get(name), str) or not obj[name]:
                    raise _Bad(name, "missing or not a non-empty string")
            p, c = raw_turn(obj["prompt"], obj["completion"], tokenizer, stops)
            pieces = [("completion", p, c, False)]
        else:
            raise _Bad("messages", 'missing: a line holds "messages" (chat) or "prompt" and "completion" (raw text)')
    except (_Bad, ToolsError) as e:
        yield TraceError(number, e.field, e.message)
        return
    for j, (where, prompt, completion, held) in enumerate(pieces, start=1):
        if not completion or not prompt:
            yield TraceError(number, where, "renders to no tokens")
            continue
        try:
            limits.check_replay_tokens(len(prompt), len(completion))
        except PlaygroundError as e:
            yield TraceError(number, where, str(e))
            continue
        if max_context is not None and len(prompt) + len(completion) > max_context:
            yield TraceError(number, where, f"{len(prompt)} + {len(completion)} tokens do not fit the target's "
                                            f"context of {max_context}")
            continue
        name = conv if len(pieces) == 1 else f"{conv} turn {j}"
        yield Turn(name, tuple(prompt), tuple(completion), "trace", conv, schema=schema if held else None,
                   schema_name=f"the tools of line {number}" if held else None)

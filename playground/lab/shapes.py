"""Output shapes: which tokens of a completion are a tool call / JSON, code, text copied from the prompt, or prose.

The rule, applied in this order (an earlier rule wins over a later one):

1. fences: a ``` fenced block (``` to ``` or to the end of the text) is code, or JSON when its language is
   `json`; the fence lines belong to the block.
2. JSON: outside fences, a span that starts at `{` or `[` and that json.loads parses (Python's raw_decode from
   that character) to an object, or to a non-empty array at least 8 characters long (so "[1]" in a sentence is
   not JSON), scanning left to right and skipping what a span covers; also an object left open at the end of
   the text (`{` then `"`: a tool call cut off by the length limit).
3. indented code: outside the above, a run of at least 2 consecutive lines that start with 4 spaces or a tab.
4. copied: a token of what is left (prose) that lies in a run of at least COPY_MIN_TOKENS tokens occurring
   verbatim in the prompt (quoted text, a copied status line).
5. prose: everything else.

A token takes the shape of the first JSON or code span that one of its characters other than whitespace falls in
(so the token ': {"' that opens a tool call's JSON is JSON), else copied or prose; special tokens (end-of-sequence)
and tokens of whitespace only take the shape of the token before them. `segment` returns one shape per completion token;
`runs` groups them into [start, end, shape] spans, so a ReAct step reads as a prose Thought then a JSON action.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from ..inputs.presets import balanced_end
from ..inputs.text import token_pieces

SHAPES = ("json", "code", "copied", "prose")
LABELS = {"json": "tool call / JSON", "code": "code", "copied": "quoted or copied text", "prose": "prose"}
COPY_MIN_TOKENS = 8
MIN_JSON_ARRAY_CHARS = 8

# an opening fence line (its language in group 1), then everything up to a closing fence line or the end
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n.*?(?:^[ \t]*```[^\n]*(?:\n|\Z)|\Z)",
                    re.DOTALL | re.MULTILINE)
_DECODER = json.JSONDecoder()
_OPEN_OBJECT = re.compile(r"\{\s*\"")


def _fences(text: str) -> list[tuple[int, int, str]]:
    return [(m.start(), m.end(), "json" if m.group(1).lower() == "json" else "code") for m in _FENCE.finditer(text)]


def _json_spans(text: str, lo: int, hi: int) -> list[tuple[int, int, str]]:
    """JSON spans in text[lo:hi] by rule 2."""
    out, i = [], lo
    while i < hi:
        starts = [p for p in (text.find("{", i, hi), text.find("[", i, hi)) if p >= 0]
        if not starts:
            break
        begin = min(starts)
        try:
            value, end = _DECODER.raw_decode(text[:hi], begin)
        except json.JSONDecodeError:
            if text[begin] == "{" and _OPEN_OBJECT.match(text, begin) and balanced_end(text, begin, hi) is None:
                out.append((begin, hi, "json"))  # an object left open at the end: a cut-off tool call
                break
            i = begin + 1
            continue
        if isinstance(value, dict) or (isinstance(value, list) and value and end - begin >= MIN_JSON_ARRAY_CHARS):
            out.append((begin, end, "json"))
            i = end
        else:
            i = begin + 1
    return out


def _indented(text: str, taken: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Runs of >= 2 lines starting with 4 spaces or a tab, outside the spans already taken (rule 3)."""
    out, run, pos = [], [], 0
    for line in text.splitlines(keepends=True):
        start, pos = pos, pos + len(line)
        inside = any(a <= start < b for a, b, _ in taken)
        if not inside and line.startswith(("    ", "\t")) and line.strip():
            run.append((start, pos))
            continue
        if len(run) >= 2:
            out.append((run[0][0], run[-1][1], "code"))
        run = []
    if len(run) >= 2:
        out.append((run[0][0], run[-1][1], "code"))
    return out


def char_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, shape) character spans of JSON and code in `text` (rules 1-3), sorted; the rest is prose."""
    spans = _fences(text)
    gaps, pos = [], 0
    for a, b, _ in spans:
        gaps.append((pos, a))
        pos = b
    gaps.append((pos, len(text)))
    for lo, hi in gaps:
        spans += _json_spans(text, lo, hi)
    spans += _indented(text, spans)
    return sorted(spans)


def copied_mask(prompt_ids: Sequence[int], completion_ids: Sequence[int], n: int = COPY_MIN_TOKENS) -> list[bool]:
    """Per completion token: whether it lies in a run of >= n tokens that occurs verbatim in the prompt (rule 4)."""
    mask = [False] * len(completion_ids)
    if len(completion_ids) < n or len(prompt_ids) < n:
        return mask
    grams = {tuple(prompt_ids[i: i + n]) for i in range(len(prompt_ids) - n + 1)}
    for j in range(len(completion_ids) - n + 1):
        if tuple(completion_ids[j: j + n]) in grams:
            for t in range(j, j + n):
                mask[t] = True
    return mask


def segment(tokenizer, prompt_ids: Sequence[int], completion_ids: Sequence[int],
            special_ids: Iterable[int] = ()) -> list[str]:
    """One shape (SHAPES) per completion token, by the rule in the module docstring. Without a tokenizer (a
    tiny test pair) every token is prose, less the copied ones."""
    special = set(special_ids) | set(getattr(tokenizer, "all_special_ids", None) or ())
    copied = copied_mask(prompt_ids, completion_ids)
    if tokenizer is None:
        return ["copied" if c else "prose" for c in copied]
    pieces = token_pieces(tokenizer, list(completion_ids))
    pieces = ["" if t in special else p for t, p in zip(completion_ids, pieces)]
    text = "".join(pieces)
    spans = char_spans(text)
    shapes, pos = [], 0
    for t, piece, cp in zip(completion_ids, pieces, copied):
        end = pos + len(piece)
        if t in special or not piece.strip():
            shapes.append(shapes[-1] if shapes else ("copied" if cp else "prose"))
            pos = end
            continue
        chars = [pos + i for i, ch in enumerate(piece) if not ch.isspace()]
        hit = next((sh for a, b, sh in spans if a < end and b > pos and any(a <= c < b for c in chars)), None)
        shapes.append(hit or ("copied" if cp else "prose"))
        pos = end
    return shapes


def runs(shapes: Sequence[str]) -> list[list]:
    """[start, end, shape] for each run of equal shapes (token offsets, end exclusive)."""
    out: list[list] = []
    for i, s in enumerate(shapes):
        if out and out[-1][2] == s:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1, s])
    return out

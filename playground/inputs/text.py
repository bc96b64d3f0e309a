"""Token ids -> the text pieces a person sees, one piece per token.

Byte-level BPE tokens need not be whole characters: a piece is the growth of the decoded prefix, and a
prefix ending in an incomplete character (U+FFFD) is held back until the next token completes it, so
every character lands on exactly one token and the pieces join to the decoded text.

A prompt as a person sends it is checked here too (check_prompt_text, read_prompt_file): empty, too long,
not UTF-8, or holding control characters is a PlaygroundError that says where.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence

from ..errors import PlaygroundError

REPLACEMENT = "\ufffd"


def token_pieces(tokenizer, tokens: Sequence[int], skip_special_tokens: bool = False) -> list[str]:
    pieces: list[str] = []
    shown = ""
    for i in range(len(tokens)):
        text = tokenizer.decode(list(tokens[: i + 1]), skip_special_tokens=skip_special_tokens)
        if text.endswith(REPLACEMENT) and i + 1 < len(tokens):
            pieces.append("")
            continue
        if text.startswith(shown):
            pieces.append(text[len(shown):])
        else:  # decoding can re-space earlier text (cleanup of spaces before punctuation): show the tail
            common = 0
            while common < min(len(text), len(shown)) and text[common] == shown[common]:
                common += 1
            pieces.append(text[common:])
        shown = text
    return pieces


def encode_prompt(tokenizer, text: str, chat: bool = True) -> list[int]:
    """A user's text -> prompt ids: as one user turn of the chat template (instruct models), or raw."""
    check_prompt_text(text)
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    return [int(t) for t in tokenizer(text, add_special_tokens=True)["input_ids"]]


# Control characters a prompt may not hold: C0 and C1 controls and DEL, except tab, newline and carriage
# return. They are rejected with their position, not stripped: the model sees exactly what the user sent.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def check_prompt_text(text, max_chars: int | None = None) -> str:
    """A prompt as typed, pasted or sent through the API: non-empty, within `max_chars`, valid Unicode that
    encodes as UTF-8 (no lone surrogates, which is how Python carries undecodable bytes from argv) and free
    of control characters other than tab and newline. Returns the text unchanged; raises PlaygroundError."""
    if not isinstance(text, str) or not text.strip():
        raise PlaygroundError("the prompt is empty: type something, or pick a preset")
    if max_chars is not None and len(text) > max_chars:
        raise PlaygroundError(f"the prompt is {len(text)} characters; this playground takes at most {max_chars} "
                              "(PLAYGROUND_MAX_PROMPT_CHARS): shorten it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(text[e.start])
        what = (f"the byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF  # surrogateescape'd from bytes
                else f"a lone surrogate U+{code:04X}")
        raise PlaygroundError(f"the prompt is not valid UTF-8 text: {what} at character {e.start}; "
                              "send UTF-8 text") from None
    bad = _CONTROL.search(text)
    if bad is not None:
        raise PlaygroundError(f"the prompt contains a control character (U+{ord(bad.group()):04X}) at character "
                              f"{bad.start()}: remove it (tabs and newlines are fine)")
    return text


def read_prompt_file(path: str, max_chars: int) -> str:
    """A prompt from a file ('-': standard input), strictly UTF-8; reads at most what `max_chars` could need,
    so a huge or endless file (/dev/zero) is refused, not read."""
    limit = 4 * max_chars  # a UTF-8 character is at most 4 bytes
    where = "standard input" if path == "-" else f"the prompt file {path!r}"
    try:
        if path == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(path, "rb") as f:
                data = f.read(limit + 1)
    except OSError as e:
        raise PlaygroundError(f"cannot read {where}: {e.strerror or e}") from None
    if len(data) > limit:
        raise PlaygroundError(f"{where} is longer than {max_chars} characters (PLAYGROUND_MAX_PROMPT_CHARS)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlaygroundError(f"{where} is not UTF-8 text: the byte 0x{data[e.start]:02x} at offset {e.start} "
                              f"({e.reason}); save it as UTF-8") from None

"""Token ids -> the text pieces a person sees, one piece per token.

Byte-level BPE tokens need not be whole characters: a piece is the growth of the decoded prefix, and a
prefix ending in an incomplete character (U+FFFD) is held back until the next token completes it, so
every character lands on exactly one token and the pieces join to the decoded text.
"""

from __future__ import annotations

from typing import Sequence

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
    from .errors import PlaygroundError

    if not isinstance(text, str) or not text.strip():
        raise PlaygroundError("the prompt is empty: type something, or pick a preset")
    if chat and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    return [int(t) for t in tokenizer(text, add_special_tokens=True)["input_ids"]]

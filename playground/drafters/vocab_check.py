"""Does a drafter with its own tokenizer (a GGUF in llama.cpp) give the target's token ids? Probe texts tokenized
by both sides must agree: a drafter has to share the target's vocabulary for its guesses to mean anything."""

from __future__ import annotations

from ..core.cached import common_prefix
from ..errors import PlaygroundError


def check_tokenizer(proposer, tokenizer) -> None:
    """`proposer` (with tokenize(text), vocab_size and gguf_path) must give the target's token ids: compare the tokenization of probe texts (special
    tokens, chat markup, code, non-ASCII, and the decoded text of a spread of vocabulary ids)."""
    texts = _probe_texts(tokenizer, proposer.vocab_size)
    for text in texts:
        expected = tokenizer.encode(text, add_special_tokens=False)
        got = proposer.tokenize(text)
        if got != expected:
            i = common_prefix(got, expected)
            raise PlaygroundError(
                f"{proposer.gguf_path.name} does not tokenize like the target: at token {i} of "
                f"{text[:60]!r}... it gives id {got[i] if i < len(got) else 'none'} where the target has "
                f"{expected[i] if i < len(expected) else 'none'}; a drafter must share the target's tokenizer"
            )


def _probe_texts(tokenizer, vocab_size: int, n_ids: int = 1500) -> list[str]:
    special = [t for t in getattr(tokenizer, "all_special_tokens", []) if t]
    texts = [
        "".join(special),
        "<|im_start|>user\nWrite a Python function that adds two numbers.<|im_end|>\n<|im_start|>assistant\n",
        'def add(a, b):\n    """Add."""\n    return a + b  # 12345 \t{"json": [1, 2.5e-3, null]}\n',
        "Ünïcödé — naïve café, 東京, émoji 🙂, Ελληνικά, русский.   spaces   and\n\n\nnewlines",
    ]
    step = max(1, vocab_size // n_ids)
    ids = list(range(0, vocab_size, step))
    texts.append(tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))
    return [t for t in texts if t]

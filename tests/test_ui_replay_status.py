"""The Replay tab's status lines as a user sees them, without a browser (issue 56): the part before the "more" fold
never ends inside brackets."""

from __future__ import annotations

import re

import pytest

from playground.ui.markup import STATUS_CHARS, fold
from tests import test_ui_replay as rp


def visible(line: str) -> str:
    """What a status line shows before its "more" fold is opened."""
    return fold(line).split(" <details", 1)[0]


def squeezed(text: str) -> str:
    """The words, without the spaces and the separators a fold may drop where it cuts."""
    return re.sub(r"[\s\u00b7\u2014]", "", text)


def unbalanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += (ch in "([{") - (ch in ")]}")
        if depth < 0:
            return True
    return depth != 0


@pytest.mark.parametrize("line", [
    ("Calibrating draft model on 230 tokens of context (step 1 of 2 \u00b7 timing the target over 64 tokens and the "
     "drafter \u00b7 12 s) \u00b7 the sample trace with lookup"),
    ("Calibrated the draft model on 64 tokens of context: c = 0.21 (trusted; the spread of its timed cycles is 3%, "
     "under the limit of 10%) \u00b7 4 cycles after 2 warm-up"),
    "Loading [the pair smollm2-1.7b, HuggingFaceTB/SmolLM2-1.7B-Instruct + HuggingFaceTB/SmolLM2-135M-Instruct; "
    "from the cache] " + "x" * 30,
])
def test_the_fold_never_cuts_inside_brackets(line):
    head = visible(line)
    assert head != line and len(head) <= STATUS_CHARS and not unbalanced(head), head
    assert squeezed(rp.shown(fold(line))) == squeezed(line)  # nothing lost, only folded

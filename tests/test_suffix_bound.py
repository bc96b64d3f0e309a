"""scripts/suffix_bound.py's copying oracle: the passes it counts are those of a drafter that, at every pass,
copies the longest stretch of what comes next that the trace showed it before, and no more."""

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

SPEC = importlib.util.spec_from_file_location("suffix_bound", Path(__file__).parents[1] / "scripts" / "suffix_bound.py")
bound = importlib.util.module_from_spec(SPEC)
sys.modules[SPEC.name] = bound
SPEC.loader.exec_module(bound)


def turn(prompt, completion):
    return SimpleNamespace(prompt_ids=tuple(prompt), completion_ids=tuple(completion))


def test_a_stretch_seen_in_an_earlier_turn_is_copied_up_to_k():
    earlier = bound._text([1, 2, 3, 4, 5])
    t = turn([9], [1, 2, 3, 4, 7])
    assert bound.copy_walk(t, 8, earlier) == 1  # [1, 2, 3, 4] copied, 7 the target's own token
    assert bound.copy_walk(t, 2, earlier) == 2  # [1, 2] + 3, then [4] + 7
    assert bound.copy_walk(t, 8, "") == 5  # nothing seen: one token a pass


def test_the_turns_own_output_so_far_is_searched():
    # [4, 5] is copied from the output itself once it has been written.
    assert bound.copy_walk(turn([0], [4, 5, 4, 5, 4, 5, 8]), 8, "") == 4


def test_no_copy_runs_across_the_boundary_between_two_texts():
    # The first turn's prompt [1] and completion [2] are separate texts: [1, 2] was never seen in one piece.
    turns = [turn([1], [2]), turn([5], [1, 2, 9])]
    assert bound.copy_passes(turns, 8) == [1, 2]
    # ...but once a text holds it, it is copied.
    assert bound.copy_passes([turn([1, 2], [3]), turn([5], [1, 2, 9])], 8) == [1, 1]


def test_token_ids_are_matched_whole_never_from_inside_another():
    assert len(bound._text([0, 300, 49151])) == 3
    assert bound._text([3]) not in bound._text([300])

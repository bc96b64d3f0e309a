"""Replay: which k for an agent, from its recorded outputs, without generating anything.

`replay_turns(pair, turns, options)` takes recorded turns (playground.inputs.traces: a trace file; or presets / a
prompt whose completion is the target's own greedy output, `preset_turns` / `text_turn`) and, per turn and drafter,
walks every k and controller of the `ReplayOptions` (options.py) through the engine's loop with teacher-forced
passes in place of generation (walk.py says how, and when a walk is exact or an estimate). `feeding` decides where a
model drafter's proposals come from: "live" walks it through its own proposer, fed as a live run feeds it; "shared"
reads them from one pass per turn; "auto" (the default) takes the shared pass where its walks equal the live-fed
ones (walk.shared_exact): for llama.cpp (72 of 72 walks, 4 presets x k = 1..16 and both controllers;
tests/test_replay_embedded.py) and for the int8 draft on the lean forward, whose logits do not depend on how its
feed was chunked (core.int8), and live feeding for other draft models. Adaptive k (where the turn is exact) and
`min_confidence` (a draft confidence stop) depend on the drafter's probabilities after its own proposals, which one
shared pass does not have, so they feed a model drafter live. With a calibration the walks carry the predicted
speed-up (playground.core.cost); summary.py pools the turns per output shape and recommends a k. The result is a
`ReplayResult` (playground.results.replay).
"""

from .options import FEEDINGS, ReplayOptions, check_confidence
from .report import replay_table
from .run import calibration_contexts, greedy_turn, preset_turns, replay_turns, text_turn
from .walk import target_chunks

__all__ = ["FEEDINGS", "ReplayOptions", "calibration_contexts", "check_confidence", "greedy_turn",
           "preset_turns", "replay_table", "replay_turns", "target_chunks", "text_turn"]

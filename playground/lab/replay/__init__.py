"""Replay: which k for an agent, from its recorded outputs, without generating anything.

`replay_turns(pair, turns, options)` takes recorded turns (playground.inputs.traces: a trace file; or presets / a
prompt whose completion is the target's own greedy output, `preset_turns` / `text_turn`) and, per turn and drafter,
walks every k and controller of the `ReplayOptions` (options.py) through the engine's loop with
teacher-forced passes in place of generation (walk.py says how). `feeding` decides where a model drafter's
proposals come from: "live" walks it through its own proposer, fed as a live run feeds it; "shared" reads them from
one pass per turn (its own propose, one token at a time); "auto" (the default) takes the shared pass where its
walks equal the live-fed ones (walk.shared_exact): for llama.cpp (72 of 72 walks, 4 presets x k = 1..16 and
both controllers; tests/test_replay_embedded.py) and for the int8 draft on the lean forward, whose logits do not depend
on how its feed was chunked (core.int8; the same 72 walks equal, 2026-12-04; 47 differed with activations scaled per
feed), and live feeding for other draft models; adaptive k, which stops a drafter on its confidence past a rejection
too, feeds it live wherever the turn is exact. A completion the target did not write is read from the shared pass.
Each walk yields the simulated `Iteration` records (zero timings, marked simulated), the accepted-length histogram,
per-position acceptance, the controller's choices and, with a calibration (`timing_of(drafter, prompt_ids) ->
Timing`), the predicted speed-up: sum over iterations of k*c + overhead + v(k+1) target steps (playground.core.cost)
against one step per token for plain decoding.

A turn is *exact* when decoding is greedy and the completion is the target's own greedy continuation (checked:
the target's teacher-forced arg-max equals the recorded token at every position); then a replayed walk is the
live run's iterations, up to floating-point near-ties of the target (reported with their logit gaps). A
completion written by another model, a shared-pass replay of a draft model fed live otherwise, and every sampling
replay are estimates, and say so. summary.py pools the turns per output shape and recommends a k. The
result is a `ReplayResult` (playground.results.replay).

`min_confidence` replays runs with a draft confidence stop (`speculative_generate(min_confidence=)`, transformers'
assistant_confidence_threshold): a model drafter stops drafting after a proposal whose own probability is below it.
Where it stops depends on the drafter's probabilities after its own proposals, which one shared pass does not have,
so every model drafter is then fed live, a completion the target did not write included (an estimate, as always).

The package: run (replay_turns and the turns it takes), walk (a walk over teacher-forced passes), options (what a
replay is asked, what turns share: ReplayOptions, TraceMemory), sampling (sampled turns in expectation), schema
(constrained walks and what a turn's schema is worth), suffix (the suffix drafters' history), summary (pooled per
output shape, the recommendation) and report (its tables).
"""

from .options import FEEDINGS, ReplayOptions, TraceMemory, check_confidence
from .report import replay_table
from .run import calibration_contexts, greedy_turn, preset_turns, replay_turns, text_turn
from .walk import target_chunks

__all__ = ["FEEDINGS", "ReplayOptions", "TraceMemory", "calibration_contexts", "check_confidence", "greedy_turn",
           "preset_turns", "replay_table", "replay_turns", "target_chunks", "text_turn"]

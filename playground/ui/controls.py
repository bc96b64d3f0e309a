"""What the Run tab's controls do by themselves, with no model: range checks (a value typed out of its range
says so instead of being clamped in silence), the sampling and k controls' state, clearing a stale error, the
download button's note, and forgetting the suffix drafters' runs. wiring.py wires the model events.
"""

from __future__ import annotations

import gradio as gr

from . import handlers, javascript
from .markup import READY, fold
from .ranges import SLIDERS, range_check, remember_moves


def wire_controls(ui, limits) -> None:
    """What the controls do by themselves: range checks, the sampling and k controls' state, stale errors."""
    quiet = {"queue": False, "api_visibility": "private", "show_progress": "hidden"}
    raw = {**quiet, "preprocess": False}
    checks = [(ui.k, "k", 1, 16, True, True, ui.status), (ui.max_new, "max new tokens", 1, limits.max_new_tokens,
                                                          True, False, ui.status),
              (ui.top_k, "top-k", 0, None, True, False, ui.status), (ui.seed, "seed", 0, None, True, False, ui.status),
              (ui.temperature, "temperature", 0.05, 2.0, False, True, ui.status),
              (ui.top_p, "top-p", 0.05, 1.0, False, True, ui.status),
              (ui.min_confidence, "the draft confidence stop", 0.0, 1.0, False, True, ui.status),
              (ui.k_max, "the largest k", 1, 16, True, True, ui.sweep_status),
              (ui.rounds, "rounds", 1, 5, True, True, ui.sweep_status),
              (ui.sweep_new, "max new tokens per run", 1, limits.max_new_tokens, True, False, ui.sweep_status)]
    for comp, label, lo, hi, whole, slider, where in checks:
        check = range_check(label, lo, hi, whole, slider)
        if label in SLIDERS:
            comp.change(remember_moves(check, label, lo, hi), [comp, where, ui.moved], [where, ui.moved], **raw)
        else:
            comp.change(check, [comp, where], [where], **raw)

    def sampling_controls(decoding):
        on = decoding == "sample"
        return gr.update(interactive=on), gr.update(interactive=on), gr.update(interactive=on)

    ui.decoding.change(sampling_controls, [ui.decoding], [ui.temperature, ui.top_k, ui.top_p], **quiet)

    def k_control(mode):
        fixed = mode == "fixed"
        return gr.update(interactive=fixed, info="fixed k only; adaptive and heuristic choose k themselves" if fixed
                         else f"not used: {mode} k chooses k per iteration")

    ui.k_mode.change(k_control, [ui.k_mode], [ui.k], **quiet)
    clear = javascript.clear_stale_error(READY)
    for comp in (ui.prompt, ui.chat, ui.drafter, ui.k_mode, ui.min_confidence, ui.decoding, ui.preset):
        comp.input(None, [ui.status], [ui.status], js=clear, **quiet)

    def nothing_yet(session):
        """Say so when there is no finished run to download (the button has no file to give yet)."""
        if session is None or session.run is None or not session.run.finished:
            return fold("Nothing to download yet: press **Run** first \u00b7 the file holds the run's request, records, "
                        "summary, environment and, after **Compare with plain**, the plain run and its verdict.")
        return gr.skip()

    ui.download.click(nothing_yet, [ui.session], [ui.status], **quiet)
    # The suffix drafters' memory of this tab's runs: emptied on request (the Done line says what it holds).
    ui.forget_btn.click(handlers.forget_runs, [ui.session], [ui.status, ui.session], **quiet)

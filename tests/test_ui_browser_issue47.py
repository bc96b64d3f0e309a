"""Issue 47's other four fixes, driven in a real headless Chromium (tests/test_ui_browser.py's browser and page):
the handler-level checks of tests/test_ui_statuses.py, asserted through what the page shows.

3. a sweep's words agree with its numbers: the summary's recommended k and its 'largest k swept' sentence name
   the k at which the table's measured column and every curve of the chart peak;
4. a hybrid gets no prediction from a single-c model, the same after Calibrate, after Compare and in What-if:
   'no model for this drafter' and the run's own iterations costed (issue 56), where the draft model's run gets its
   iid prediction;
5. a calibration on another length stands in, labelled, with no calibration hidden inside the run, and Calibrate
   then times this length;
7. a trace over the turn cap (PLAYGROUND_MAX_REPLAY_TURNS lowered to 2) is announced before it runs: turns,
   tokens, time, what the cap skipped and the first-N offer, with no replay progress before it; pressed again,
   it runs."""

from __future__ import annotations

import copy
import json
import re

import pytest

from playground.ui.verdicts import SWEEP_COLUMNS
from tests import test_ui_browser as house
from tests.test_ui_browser import STATUS_JS, TINY_PROMPT, set_value, status, wait_status, wait_text
from tests.test_ui_statuses import recorded_sweep

browser, page = house.browser, house.page  # Debian's chromium with the project's flags, a 1440 px page

pytestmark = pytest.mark.slow

LONG_PROMPT = " ".join(f"w{i % 60 + 1}" for i in range(180))  # ~180 tokens: bucket 256, two doublings from 64
CAP = 2  # PLAYGROUND_MAX_REPLAY_TURNS for this module's app


@pytest.fixture(scope="module")
def app_url(launch_app):
    """The app on a tiny random pair (a noisy copy as its draft), Calibrate at one timed cycle, the replay cap at
    CAP turns (read from the environment when the app is built, as an operator sets it), and a sweep that returns
    issue 47's recorded tool-call sweep: trusted, every curve peaking at k = 8, the largest k swept."""
    import torch

    from playground.pairs.models import ModelPair
    from playground.ui import build_ui
    from playground.ui.serving import PairProvider
    from tests.tiny import perturbed, tiny_model, word_tokenizer

    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    pair = ModelPair(target=target, tokenizer=word_tokenizer([f"w{i}" for i in range(63)]),
                     draft=perturbed(target, noise=0.015), eos_ids=frozenset({63}), target_name="tiny-target",
                     draft_name="tiny-draft")
    recorded = recorded_sweep()

    def sweep_fn(request, progress=None):
        progress(1.0, "round 3/3")
        return copy.deepcopy(recorded)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLAYGROUND_MAX_REPLAY_TURNS", str(CAP))
        yield launch_app(build_ui(PairProvider(pair=pair), sweep_fn=sweep_fn, calibrate_repeats=1))


def pick_drafter(page, label: str, where: str = "#drafter") -> None:
    """The radio whose label is exactly `label` ('hybrid', not 'suffix hybrid')."""
    page.locator(f"{where} label").filter(has_text=re.compile(f"^\\s*{re.escape(label)}\\s*$")).click()


def record(page, selector: str) -> None:
    """Keep every text `selector` takes in window.seen[selector]: polling can miss a line replaced within a frame."""
    page.evaluate("""sel => { window.seen = window.seen || {}; window.seen[sel] = [];
        new MutationObserver(() => { const el = document.querySelector(sel);
                                     if (el) window.seen[sel].push(el.innerText); })
            .observe(document.body, {subtree: true, childList: true, characterData: true}); }""", selector)


def seen(page, selector: str) -> list[str]:
    return page.evaluate("sel => window.seen[sel]", selector)


def calibrate(page) -> str:
    """Click Calibrate and return its own answer, read as status() reads it: the status must change from what it
    said before the click (the previous calibration's line already matches) and start with the answer (not
    Gradio's '0.0s' timer, which comes and goes while the event ends)."""
    before = status(page)
    page.locator("#calibrate-btn").click()
    matched = page.wait_for_function(f"before => {{ const t = ({STATUS_JS})('#status');"
                                     " return t !== before && /^(Calibrated|Already calibrated)/.test(t) && t; }",
                                     arg=before)
    return matched.json_value()  # the line that matched: a second read can catch Gradio's timer again


def run(page) -> str:
    page.locator("#run-btn").click()
    wait_status(page, "Done")
    return status(page)


def table_rows(page, selector: str, columns: int) -> list[list[str]]:
    """A Gradio Dataframe's body as read: its text is one cell a line, the header set apart by a blank line."""
    body = page.locator(selector).inner_text().split("\n\n\n", 1)[1].split("\n")
    cells = [c.strip() for c in body if c.strip()]
    assert len(cells) % columns == 0, cells
    return [cells[i:i + columns] for i in range(0, len(cells), columns)]


def test_the_sweep_summary_chart_and_table_tell_one_story(app_url, page):
    page.goto(app_url)
    pick_drafter(page, "draft model")  # a drafter the single-c predictions fit: all three curves drawn
    page.locator("#prompt textarea").fill(TINY_PROMPT)
    page.get_by_role("tab", name="k per output shape").click()
    set_value(page, "#k-max input[type=number]", "8")
    page.locator("#sweep-btn").click()
    wait_status(page, "Sweep done", "#sweep-status")
    page.wait_for_selector("#sweep-plot .js-plotly-plot")
    line = status(page, "#sweep-status")
    assert "Sweep done: recommended k = 8 " in line, line
    summary = page.locator("#sweep-summary").inner_text()
    lead = summary.split("How measured")[0]
    assert "Recommended k = 8" in lead and "(trusted)" in lead, lead
    assert "predictions peak at k = 8, as measured." in lead
    assert "k = 8 is the largest k swept" in lead and "adaptive k chose up to 16" in lead
    assert "'Largest k' (up to 16)" in lead  # the wider sweep, offered
    assert "k = 6" not in summary and "disagrees" not in summary and "see the verdict" not in summary

    # the table: the measured column peaks at k = 8, the largest fixed k in it (the edge the words name)
    rows = table_rows(page, "#sweep-table", len(SWEEP_COLUMNS))
    assert page.locator("#sweep-table thead").inner_text().split() == " ".join(SWEEP_COLUMNS).split()
    fixed = {int(r[0]): float(r[1]) for r in rows if r[0].isdigit()}
    assert max(fixed, key=fixed.get) == 8 == max(fixed), rows
    assert any(r[0] == "adaptive" for r in rows)
    for column in (5, 6, 7):  # predicted (iid), (per position), (loop costs): each peaks at 8 too
        predicted = {int(r[0]): float(r[column]) for r in rows if r[0].isdigit()}
        assert max(predicted, key=predicted.get) == 8, (column, rows)

    # the chart: the measured and every predicted curve peak at k = 8, where the recommended-k line stands
    figure = page.evaluate("(() => { const p = document.querySelector('#sweep-plot .js-plotly-plot');"
                           " return {data: p.data.map(t => ({name: t.name, x: t.x, y: t.y, k: t.customdata})),"
                           " shapes: p.layout.shapes}; })()")
    curves = {t["name"]: t for t in figure["data"] if t["name"].startswith(("measured", "predicted"))}
    assert {"measured (median)", "predicted (iid \u03b1)", "predicted (per position)",
            "predicted (loop costs)"} <= set(curves), list(curves)
    for name, t in curves.items():
        ks = t["k"] or t["x"]
        assert ks[t["y"].index(max(t["y"]))] == 8, (name, ks, t["y"])
    assert any(s.get("x0") == 8 == s.get("x1") for s in figure["shapes"])
    labels = page.eval_on_selector_all("#sweep-plot .annotation-text", "els => els.map(e => e.textContent)")
    assert "recommended k = 8" in labels and not any(re.search(r"recommended k = (?!8)", t) for t in labels)
    wait_status(page, "Sweep done: recommended k = 8")  # and above the tabs


def test_a_hybrid_gets_one_kind_of_prediction_after_calibrate_compare_and_in_whatif(app_url, page):
    page.goto(app_url)
    page.locator("#drafter-help summary").click()  # every drafter explained, in the registry's words
    assert "suffix hybrid\nsuffix decoding where its match" in page.locator("#drafter-help").inner_text()
    page.locator("#prompt textarea").fill(TINY_PROMPT)
    page.locator("#k-mode label", has_text="fixed k").click()
    set_value(page, "#k input[type=number]", "4")
    set_value(page, "#max-new input", "12")
    pick_drafter(page, "hybrid")
    calibrate(page)  # before any run: no per-k table of one c
    page.wait_for_function("document.querySelector('#prediction').innerText.includes('Calibrated on ')")
    calibrated = page.locator("#prediction").inner_text()
    assert "No prediction per k for hybrid \u2014 no model for this drafter" in calibrated, calibrated
    assert "Predicted speed-up per k" not in calibrated
    page.locator("#compare-btn").click()
    wait_status(page, "Compared")
    compared = page.locator("#prediction").inner_text()
    costed = re.search(r"costed: this run's own iterations\s+([\d.]+)\u00d7", compared)
    assert "no model for this drafter" in compared and costed, compared
    assert "predicted, iid" not in compared and "per-position acceptance" not in compared, compared
    page.get_by_role("tab", name="What if").click()
    wait_text(page, "#whatif-from", "of hybrid's model drafter alone (no model for this drafter")
    whatif = page.evaluate(STATUS_JS, "#whatif-status")
    assert "no model for this drafter" in whatif and f"its own iterations costed: {costed[1]}\u00d7" in whatif, whatif
    assert "predicted with these costs" not in whatif
    page.get_by_role("tab", name="Run").click()
    pick_drafter(page, "draft model")  # the model fits the draft model: its iid prediction, as before
    run(page)
    calibrate(page)
    page.wait_for_function("document.querySelector('#prediction').innerText.includes('predicted, iid')")
    assert "no model for this drafter" not in page.locator("#prediction").inner_text()


def test_a_calibration_on_another_length_stands_in_labelled_and_calibrate_times_this_one(app_url, page):
    page.goto(app_url)
    pick_drafter(page, "prompt lookup")
    page.locator("#prompt textarea").fill(TINY_PROMPT)  # short: the 64-token bucket
    calibrate(page)
    page.locator("#prompt textarea").fill(LONG_PROMPT)  # another length: the 256-token bucket
    page.locator("#k-mode label", has_text="adaptive").click()  # needs a calibration for this context
    set_value(page, "#max-new input", "6")
    record(page, "#status")
    line = run(page)
    assert not any("calibrating" in t for t in seen(page, "#status")), seen(page, "#status")  # none inside the run
    assert "k = adaptive" in line, line
    prediction = page.locator("#prediction").inner_text()
    note = re.search(r"the calibration on \d+ tokens of context \(the 64-token bucket\) stands in for this "
                     r"prompt's (\d+) tokens; Calibrate times this length", prediction)
    assert note and int(note[1]) > 128, prediction
    line = calibrate(page)  # times this length: not 'Already calibrated' from the short prompt's bucket
    assert line.startswith("Calibrated "), line
    assert f"on {note[1]} tokens of context" in line, line
    page.wait_for_function("!document.querySelector('#prediction').innerText.includes('stands in')")
    assert calibrate(page).startswith("Already calibrated")  # this length now has its own


def write_trace(path) -> str:
    """Four good turns (two past the cap) and one bad line."""
    prompts = ["w1 w2 w3 w4 w5 w1 w2 w3", "w7 w8 w9 w7 w8", "w20 w21 w22 w23 w20 w21", "w30 w31 w32 w30 w31"]
    lines = [json.dumps({"id": f"t{i}", "prompt": p, "completion": " " + p}) for i, p in enumerate(prompts)]
    lines.insert(2, '{"prompt": "w1", "completion": 5}')
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_big_trace_is_announced_before_it_runs(app_url, page, tmp_path, monkeypatch):
    from playground.ui import replay_announce

    monkeypatch.setattr(replay_announce, "BIG_TURNS", 1)  # more turns than this are big (the app runs in this process)
    page.goto(app_url)
    page.get_by_role("tab", name="Replay").click()
    page.locator("#replay-file input[type=file]").set_input_files(write_trace(tmp_path / "trace.jsonl"))
    pick_drafter(page, "prompt lookup", "#replay-drafter")
    set_value(page, "#replay-ks textarea, #replay-ks input", "1,2")
    record(page, "#replay-status")
    record(page, "#status")
    page.locator("#replay-btn").click()
    wait_status(page, "\u26a0 Not started", "#replay-status")
    line = status(page, "#replay-status")
    assert line.startswith("\u26a0 Not started: set First turns to 1 (about "), line  # what to do first
    assert f", or press Run replay again for all {CAP} turns (about " in line and re.search(r"\d+ tokens", line), line
    assert f"2 turns past the cap of {CAP} (PLAYGROUND_MAX_REPLAY_TURNS) skipped" in line and "1 lines refused" in line
    before = seen(page, "#replay-status")
    assert not any("Replaying" in t or "Replay done" in t for t in before), before  # nothing ran first
    wait_text(page, "#status", "Not started: set First turns to 1")  # the line above the tabs says it too
    assert not any("Replaying" in t for t in seen(page, "#status"))
    assert page.locator("#replay-table").inner_text().strip() == ""  # no result drawn

    page.locator("#replay-btn").click()  # pressed again: it runs, the capped turns
    page.wait_for_function("document.querySelector('#replay-status').innerText.startsWith('Replay done')",
                           timeout=300_000)
    assert f"{CAP} turns (" in status(page, "#replay-status")

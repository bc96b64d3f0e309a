"""The playground in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright), as a new user
would drive it: the first visit runs with one click and shows every token role; a preset run shows coloured
token spans, live counters and charts; Calibrate and Compare fill the prediction panel with its trust verdict;
Stop stops; bad input gets a clear message that goes away once fixed; a queued second tab shows its place in
line; a sweep whose verdict failed shows the reason and no recommended k, and the sweep chart's labels do not
overlap; the What-if tab follows every change of its inputs with no model run, marks the last run and words a
bad value as the library does; after 'Time batches 1, 4, 8' the sweep chart draws a labelled line per batch size,
labels apart; at 390 px and 1440 px the Run button and the first result are in the first screen; a tab closed
mid-run stops its run (the last ones on a tiny slowed pair).

Screenshots: each test saves its state at the end (path printed). PLAYGROUND_SCREENSHOTS=DIR keeps the
documentation's screenshots there (first-visit.png, playground.png, tool-call-run.png, sweep.png);
PLAYGROUND_SCREENSHOT=path.png keeps a copy of playground.png there, as before."""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest

from playground.ui import chromium

pytestmark = pytest.mark.slow

TIMEOUT_MS = 180_000
ROLE_COLOURS = {"acc": "rgb(187, 247, 208)", "cor": "rgb(254, 202, 202)", "bon": "rgb(191, 219, 254)"}


def keep(path, name: str) -> None:
    """Copy a screenshot to PLAYGROUND_SCREENSHOTS (the docs' folder), when it is set."""
    folder = os.environ.get("PLAYGROUND_SCREENSHOTS")
    if folder:
        shutil.copy(path, os.path.join(folder, name))


@pytest.fixture(scope="module")
def app_url(launch_app):
    from playground.ui import build_ui

    return launch_app(build_ui())


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(chromium.PATH):
        pytest.skip(f"{chromium.PATH} is missing: run scripts/install_browser.sh")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = chromium.launch_chromium(p)
        try:
            yield b
        finally:
            b.close()


def counter(page, key: str) -> str:
    return page.locator(f'#counters [data-counter="{key}"] .value').inner_text()


# The whole status line, the part folded behind 'more' included (what a tap on it shows), without Gradio's progress
# tracker: its hidden timer ("0.1s") can still sit in the element's text when the final line arrives
STATUS_JS = """sel => { const c = document.querySelector(sel).cloneNode(true);
    c.querySelectorAll('[data-testid="status-tracker"]').forEach(t => t.remove());
    c.querySelectorAll('summary').forEach(s => s.replaceWith(' '));
    return c.textContent.replace(/\\s+/g, ' ').trim(); }"""


def status(page, selector: str = "#status") -> str:
    """The status line as STATUS_JS reads it."""
    return page.evaluate(STATUS_JS, selector)


def wait_status(page, prefix: str, selector: str = "#status") -> None:
    page.wait_for_function(f"document.querySelector({json.dumps(selector)}).innerText.startsWith({json.dumps(prefix)})")


def in_first_screen(page, selector: str) -> bool:
    """The element's box lies inside the viewport as the page is scrolled now."""
    box = page.locator(selector).first.bounding_box()
    view = page.viewport_size
    return box is not None and box["y"] >= 0 and box["y"] + min(box["height"], 60) <= view["height"] \
        and box["x"] >= 0 and box["x"] + box["width"] <= view["width"] + 1


@pytest.fixture
def page(browser, tmp_path):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    yield page
    page.screenshot(path=str(tmp_path / "last.png"), full_page=True)  # the state at the end (or at a failure)
    print(f"last state: {tmp_path / 'last.png'}")
    page.close()


def test_the_first_visit_runs_with_one_click_and_shows_every_role(app_url, page, tmp_path):
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(app_url)
    page.wait_for_selector("#run-btn")
    assert page.locator("#prompt textarea").input_value().startswith("Here is a to-do list")  # ready to run
    assert status(page).startswith("Ready")
    assert in_first_screen(page, "#run-btn") and in_first_screen(page, "#tokens")
    page.locator("#run-btn").click()
    # at once (a client-side first step, no round trip): never "Ready" while the event waits or runs
    page.wait_for_function("!document.querySelector('#status').innerText.startsWith('Ready')", timeout=3000)
    wait_status(page, "Done")
    classes = page.eval_on_selector_all("#tokens .tok", "els => els.map(e => [...e.classList])")
    roles = {c[1] for c in classes}
    assert {"acc", "cor", "bon"} <= roles, roles  # accepted, corrected and bonus tokens ...
    assert any("lk" in c for c in classes)  # ... and tokens copied by prompt lookup (outlined)
    for role, colour in ROLE_COLOURS.items():  # styled, not just tagged
        assert page.eval_on_selector(f"#tokens .tok.{role}", "e => getComputedStyle(e).backgroundColor") == colour
    assert page.eval_on_selector("#tokens .tok.lk", "e => getComputedStyle(e).outlineStyle") == "dashed"
    assert "hybrid" in status(page) and in_first_screen(page, "#tokens")
    page.evaluate("window.scrollTo(0, 0)")
    shot = tmp_path / "first-visit.png"
    page.screenshot(path=str(shot))  # the first screen at 1440x1000
    keep(shot, "first-visit.png")
    assert not errors, errors


def test_preset_run_shows_coloured_tokens_live_counters_and_charts(app_url, page, tmp_path):
    from playground.inputs.presets import get_preset

    preset = get_preset("tool_call")
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(app_url)
    page.wait_for_selector("#run-btn")
    page.wait_for_selector("#time-plot .js-plotly-plot")  # plotly.js is loaded before any run
    page.locator("#drafter label", has_text="auto").click()  # the best drafter here (llama.cpp)

    # pick a preset: the prompt box fills with the exact text the model sees, and its description shows
    page.locator("#preset input").click()
    page.get_by_role("option", name=preset.title).click()
    page.wait_for_function("document.querySelector('#prompt textarea').value.includes('<|im_start|>')")
    assert preset.kind in page.locator("#preset-info").inner_text()
    # the preset's own length landed (it comes in the update that filled the prompt): typed before, it would win
    page.wait_for_function(f"document.querySelector('#max-new input').value === '{preset.max_new_tokens}'")
    for _ in range(3):  # the event's completion may bring its last update again after the box was typed in
        set_value(page, "#max-new input", "14")
        page.wait_for_timeout(1500)
        if page.locator("#max-new input").input_value() == "14":
            break
    page.locator("#k-mode label", has_text="adaptive").click()  # k chosen per iteration by the cost model
    page.wait_for_function("document.querySelector('#k input[type=range]').disabled")  # k is not used now

    # run: tokens stream in as coloured spans; the counters move while it runs
    page.locator("#run-btn").click()
    page.wait_for_selector("#tokens .tok")
    page.wait_for_function(
        "document.querySelector('#counters [data-counter=\"iterations\"] .value').innerText !== '0'")
    wait_status(page, "Done")

    spans = page.locator("#tokens .tok")
    n = spans.count()
    assert counter(page, "new_tokens") == f"{n} / 14"
    assert int(counter(page, "iterations")) >= 1 and counter(page, "tokens_per_s") != "\u2013"
    assert "k = adaptive (chosen: " in status(page)
    roles = page.eval_on_selector_all("#tokens .tok", "els => els.map(e => e.classList[1])")
    assert set(roles) <= {"acc", "cor", "bon", "pln"} and "acc" in roles
    accepted_bg = page.eval_on_selector("#tokens .tok.acc", "e => getComputedStyle(e).backgroundColor")
    assert accepted_bg == "rgb(187, 247, 208)"  # styled, not just tagged
    title = spans.first.get_attribute("title")
    assert title.startswith("iteration 1")
    assert "p(x)" in page.locator("#tokens .tok.acc").first.get_attribute("title")  # (adaptive k may start at 0)
    assert page.locator("#tokens .it").count() == int(counter(page, "iterations"))
    spans.first.hover()
    spans.first.click()  # a tap shows the token's details (touch screens have no hover)
    assert page.locator("#tokens .tok-detail").inner_text().startswith("iteration 1")
    # charts were drawn from the run, and the JSON output was checked against the preset's schema
    assert page.locator("#time-plot .bars path").count() > 0
    assert page.locator("#pos-plot .bars path").count() > 0
    assert "Output check" in page.locator("#check").inner_text()

    shot = tmp_path / "playground.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    if os.environ.get("PLAYGROUND_SCREENSHOT"):
        shutil.copy(shot, os.environ["PLAYGROUND_SCREENSHOT"])
    keep(shot, "playground.png")
    assert shot.stat().st_size > 20_000
    assert not errors, errors

    # Back to a fixed k, at the preset's own length so the JSON completes: Calibrate, then Compare with plain.
    page.locator("#k-mode label", has_text="fixed k").click()
    page.wait_for_function("!document.querySelector('#k input[type=range]').disabled")
    page.locator("#max-new input").fill(str(preset.max_new_tokens))
    page.locator("#max-new input").press("Tab")
    page.locator("#calibrate-btn").click()
    page.wait_for_function("/^(Calibrated|Already calibrated)/.test(document.querySelector('#status').innerText)")
    assert "trusted" in status(page) or "UNTRUSTWORTHY" in status(page)  # the calibration's verdict, said
    assert "Predicted speed-up per k" in page.locator("#prediction").inner_text()  # filled without a run

    # Compare with plain: the speculative run again, then plain decoding right after; the measured ratio shows
    page.locator("#compare-btn").click()
    wait_status(page, "Compared")
    prediction = page.locator("#prediction").inner_text()
    assert "measured" in prediction and "\u00d7" in prediction and "prefill excluded" in prediction
    assert "predicted, iid \u03b1" in prediction  # the calibration fed the prediction beside the measurement
    assert "costed: this run's own iterations" in prediction  # and costed the run's own iterations
    assert "This comparison:" in prediction and "one speculative and one plain run" in prediction  # the verdict
    assert "Both runs showed only their progress while they decoded" in prediction  # drawn alike: no page cost
    assert "valid against the schema" in page.locator("#check").inner_text()
    page.evaluate("window.scrollTo(0, 0)")
    shot = tmp_path / "tool-call-run.png"
    bottom = page.locator("#prediction").bounding_box()
    page.screenshot(path=str(shot), clip={"x": 0, "y": 0, "width": 1440,
                                          "height": min(bottom["y"] + bottom["height"] + 16, 1600)}, full_page=True)
    keep(shot, "tool-call-run.png")

    # Stop cancels a long run and frees the worker: the next event is served at once. A story opening as
    # raw text, so the run does not end at an early end-of-sequence before Stop is pressed.
    page.locator("#prompt textarea").fill("Once upon a time, in a small village by the sea, there lived")
    page.locator("#max-new input").fill("400")
    page.locator("#max-new input").press("Tab")
    page.locator("#run-btn").click()
    wait_status(page, "Running")
    page.wait_for_selector("#tokens .tok")  # the new run's first tokens (the update that said Running cleared them)
    page.locator("#stop-btn").click()
    wait_status(page, "Stopped")
    page.wait_for_timeout(1000)  # the cancelled event closes at its next update (at most ~0.5 s apart)
    n_stopped = page.locator("#tokens .tok").count()
    page.wait_for_timeout(1500)
    assert page.locator("#tokens .tok").count() == n_stopped < 400  # nothing more arrives once stopped
    assert status(page).startswith("Stopped")

    # bad input: a clear message in the page, and the app keeps serving; once fixed, the message goes
    page.locator("#prompt textarea").fill("")
    page.locator("#run-btn").click()
    page.wait_for_function("document.querySelector('#status').innerText.includes('the prompt is empty')")
    page.get_by_text("the prompt is empty: type something, or pick a preset").last.wait_for()
    page.locator("#prompt textarea").press_sequentially("Name three colours.")
    page.wait_for_function("!document.querySelector('#status').innerText.includes('prompt is empty')")
    assert status(page).startswith("Ready")  # the status describes the present, not the old error


def test_a_sweep_in_the_browser_shows_its_verdict_and_a_recommendation_only_if_trusted(app_url, page, tmp_path):
    from playground.inputs.presets import get_preset

    page.goto(app_url)
    page.wait_for_selector("#run-btn")
    page.locator("#drafter label", has_text="auto").click()
    page.locator("#preset input").click()
    page.get_by_role("option", name=get_preset("tool_call").title).click()
    page.wait_for_function("document.querySelector('#prompt textarea').value.includes('<|im_start|>')")
    page.get_by_role("tab", name="k per output shape").click()
    for selector, value in (("#k-max input[type=number]", "3"), ("#rounds input[type=number]", "2"),
                            ("#sweep-new input", "16")):
        page.locator(selector).fill(value)
        page.locator(selector).press("Tab")
    page.locator("#sweep-btn").click()
    wait_status(page, "Sweep k: starting")  # the status line above the tabs is never "Ready" while it sweeps
    page.wait_for_function("document.querySelector('#sweep-status').innerText.includes('%')")
    assert re.search(r"\d+ s\) \u2026", status(page, "#sweep-status"))  # the elapsed time, over the whole event
    wait_status(page, "Sweep done", "#sweep-status")
    page.wait_for_selector("#sweep-plot .js-plotly-plot")
    summary = page.locator("#sweep-summary").inner_text()
    table = page.locator("#sweep-table").inner_text()
    for k in ("1", "2", "3", "adaptive"):
        assert f"\n{k}\t" in f"\n{table}" or f"\n{k}\n" in f"\n{table}\n", table
    labels = page.eval_on_selector_all("#sweep-plot .annotation-text", "els => els.map(e => e.textContent)")
    # A k, or none (a loaded machine fails the verdict; a slow one has no k beat plain), depends on this host: the
    # status lines, the summary and the chart agree on which, whichever it is (test_ui_handlers' sweep tests say
    # both outcomes' words, on any host)
    said = re.search(r"^Sweep done: (?:recommended k = (\d+) for|no recommended k)", status(page, "#sweep-status"))
    summed = re.search(r"Recommended k = (\d+)|No recommended k", summary)
    drawn = [m[1] for t in labels if (m := re.fullmatch(r"recommended k = (\d+)", t))]
    assert said and summed, (status(page, "#sweep-status"), summary)
    k = said[1]  # None: no recommended k
    assert summed[1] == k and drawn == ([k] if k else []), (k, summary, labels)
    assert_labels_apart(page, "#sweep-plot")
    wait_status(page, "Sweep done")  # the status line above the tabs says how the sweep ended
    assert ("no recommended k" in status(page)) == (k is None)
    page.evaluate("document.activeElement && document.activeElement.blur()")  # no focus ring in the picture
    shot = tmp_path / "sweep.png"
    box = page.locator("#results").bounding_box()
    end = page.locator("#sweep-table").bounding_box()
    page.screenshot(path=str(shot), full_page=True,
                    clip={"x": box["x"] - 8, "y": box["y"] - 8, "width": box["width"] + 16,
                          "height": end["y"] + end["height"] - box["y"] + 16})
    keep(shot, "sweep.png")


def assert_labels_apart(page, plot: str) -> None:
    """No two of the chart's labels (annotations, the legend, the title) overlap, and none is cut off. Read in one
    go once plotly has laid every label and the frame out: while it redraws (an update just sent), a box is empty
    or the frame is missing."""
    laid_out = page.wait_for_function(
        "sel => { const els = [...document.querySelectorAll(sel.labels)], f = document.querySelector(sel.frame);"
        " const fr = f && f.getBoundingClientRect();"
        " if (!els.length || !fr || fr.width <= 0 || !els.every(e => e.getBoundingClientRect().width > 0))"
        " return null;"
        " return {frame: [fr.left, fr.width], boxes: els.map(e => { const r = e.getBoundingClientRect();"
        " return [e.textContent, r.left, r.top, r.right, r.bottom]; })}; }",
        arg={"labels": f"{plot} .annotation, {plot} .legend, {plot} .gtitle", "frame": f"{plot} .main-svg"},
        timeout=15000).json_value()
    (x, width), boxes = laid_out["frame"], laid_out["boxes"]
    for name, left, top, right, bottom in boxes:
        assert x - 1 <= left and right <= x + width + 1, (name, "cut off")
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            apart = a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2]
            assert apart, (a, b)


PASS_S = {"sleep": 0.03}  # seconds added to every forward pass of the tiny pair


@pytest.fixture
def slower():
    """Every pass of the tiny pair 0.15 s: its 33-token answer (then end of sequence) takes about 15 s."""
    PASS_S["sleep"] = 0.15
    yield
    PASS_S["sleep"] = 0.03


@pytest.fixture(scope="module")
def tiny_app_url(launch_app):
    """The app on a tiny random pair whose every forward pass sleeps 30 ms: a 200-token run lasts many seconds.
    Its sweep is injected: it reports progress, then returns what the lab returns when the verdict failed."""
    import torch

    from playground.pairs.models import ModelPair
    from playground.results.speed import SpeedRow
    from playground.ui import build_ui
    from playground.ui.serving import PairProvider
    from tests.test_ui_handlers import untrusted_sweep_result
    from tests.tiny import perturbed, tiny_model, word_tokenizer

    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    draft = perturbed(target, noise=0.015)
    for m in (target, draft):
        # on the embedding, which every forward runs (transformers', the static and the lean one)
        m.model.embed_tokens.register_forward_pre_hook(lambda *_: time.sleep(PASS_S["sleep"]))
    pair = ModelPair(target=target, tokenizer=word_tokenizer([f"w{i}" for i in range(63)]), draft=draft,
                     eos_ids=frozenset({63}), target_name="tiny-target", draft_name="tiny-draft")

    def untrusted_sweep(request, progress=None):
        for i in range(3):
            progress((i + 1) / 3, f"round 1/1: arm {i}")
            time.sleep(0.3)
        result = untrusted_sweep_result()
        result.table.append(SpeedRow(k="adaptive", median_ratio=1.02, min_ratio=0.9, max_ratio=1.1, alpha=0.8,
                                     k_values={"2": 3, "5": 4}))
        return result

    return launch_app(build_ui(PairProvider(pair=pair), sweep_fn=untrusted_sweep))


TINY_PROMPT = "w1 w2 w3 w4 w5 w1 w2 w3"


def start_run(page, url, max_new: str, prompt: str = TINY_PROMPT):
    page.goto(url)
    page.locator("#drafter label", has_text=re.compile(r"^\s*draft model\s*$")).click()  # 5 slowed passes an iteration: a long run
    page.locator("#prompt textarea").fill(prompt)
    page.locator("#max-new input").fill(max_new)
    page.locator("#max-new input").press("Tab")
    page.locator("#run-btn").click()


def test_a_queued_second_tab_shows_its_place_in_line(tiny_app_url, browser, slower):
    first, second = (browser.new_page(viewport={"width": 1440, "height": 1000}) for _ in range(2))
    try:
        for p in (first, second):
            p.set_default_timeout(TIMEOUT_MS)
        # The first run must still be going when Stop is clicked: its 33-token answer takes about 100 s at 0.6 s a
        # pass, while loading the second tab and queueing it took over 15 s on a busy machine (the `slower` pace).
        PASS_S["sleep"] = 0.6
        start_run(first, tiny_app_url, "200")
        first.wait_for_selector("#tokens .tok")
        start_run(second, tiny_app_url, "8")
        wait_status(second, "Starting")  # not "Ready" while it waits
        second.wait_for_function(
            "document.querySelector('#activity .queue-note').innerText.startsWith('Queued: position 1')")
        note = second.locator("#activity .queue-note")
        assert note.is_visible() and in_first_screen(second, "#activity .queue-note")
        box, tabs = note.bounding_box(), second.locator("#results .tab-wrapper, #results [role=tablist]").first
        tab_box = tabs.bounding_box()
        assert box["y"] + box["height"] <= tab_box["y"] + 1  # above the tab bar, not drawn under it
        assert status(second).startswith("Starting")
        PASS_S["sleep"] = 0.03
        first.locator("#stop-btn").click()
        wait_status(first, "Stopped")
        wait_status(second, "Done")
        assert not note.is_visible()  # the place in line goes once the run begins
        assert second.locator("#tokens .tok").count() == 8
    finally:
        first.close()
        second.close()


def test_a_failed_verdict_shows_its_reason_and_no_recommended_k(tiny_app_url, page):
    page.goto(tiny_app_url)
    page.locator("#prompt textarea").fill(TINY_PROMPT)
    page.get_by_role("tab", name="k per output shape").click()
    page.locator("#sweep-btn").click()
    wait_status(page, "Sweep done", "#sweep-status")
    summary = page.locator("#sweep-summary").inner_text()
    assert "This sweep: not to be trusted" in summary
    assert "other processes kept 1.60 of the 2 cores busy" in summary and "fix: stop the other work" in summary
    assert "No recommended k" in summary and "Recommended k =" not in summary
    assert "no recommended k" in status(page, "#sweep-status")
    labels = page.eval_on_selector_all("#sweep-plot .annotation-text", "els => els.map(e => e.textContent)")
    assert "break-even" in labels and "adaptive 1.02\u00d7" in labels  # every line labelled (1.02: next to 1.0)
    assert not any("recommended k" in t for t in labels)
    assert_labels_apart(page, "#sweep-plot")
    header = page.locator("#sweep-table thead").inner_text()
    assert "break-even" in header  # the last header is there, whole
    wait_status(page, "Sweep done: no recommended k")  # and above the tabs


def whatif_curve(page) -> list:
    """The predicted speed-up per k that the What-if chart draws, read from the rendered figure."""
    return page.evaluate("document.querySelector('#whatif-plot .js-plotly-plot').data[0].y")


def set_value(page, selector: str, value: str) -> None:
    page.locator(selector).fill(value)
    page.locator(selector).press("Tab")


def wait_text(page, selector: str, text: str) -> None:
    """Until the element's text, as STATUS_JS reads it (what its 'more' fold holds included), has `text`."""
    page.wait_for_function(f"({STATUS_JS})({json.dumps(selector)}).includes({json.dumps(text)})")


def test_the_whatif_tab_follows_every_change_without_a_model_run(tiny_app_url, page, tmp_path):
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(tiny_app_url)
    page.locator("#prompt textarea").fill(TINY_PROMPT)
    set_value(page, "#max-new input", "8")
    page.locator("#run-btn").click()
    wait_status(page, "Done")  # a run to mark
    page.get_by_role("tab", name="What if").click()
    page.wait_for_selector("#whatif-plot .js-plotly-plot")
    wait_text(page, "#whatif-from", "from the last run")  # filled in from this tab's run
    assert page.locator("#whatif-grid tr.run").count() == 1 and "your run" in page.locator("#whatif-grid").inner_text()
    # the seed chapter's cheap draft: c = 0.38, flat v(n), alpha = 0.85 -> 1.47x at k = 4
    set_value(page, "#whatif-c input", "0.38")
    set_value(page, "#whatif-overhead input", "0")
    set_value(page, "#whatif-v textarea", "flat")
    set_value(page, "#whatif-alpha input[type=number]", "0.85")
    wait_text(page, "#whatif-status", "iid \u03b1 = 0.85; c = 0.380, cost per call 0.000, v(n) flat")
    assert round(whatif_curve(page)[3], 2) == 1.47 and len(whatif_curve(page)) == 16
    before = whatif_curve(page)
    set_value(page, "#whatif-alpha input[type=number]", "0.6")  # the chart follows at once
    page.wait_for_function("document.querySelector('#whatif-plot .js-plotly-plot').data[0].y[3] < "
                           f"{before[3] - 0.1}")
    assert "iid \u03b1 = 0.60" in status(page, "#whatif-status")
    assert "0.60" in page.locator("#whatif-grid").inner_text()
    assert_labels_apart(page, "#whatif-plot")
    # bad values: the library's words on the tab's line, never a traceback; the chart keeps the last good inputs
    shown = whatif_curve(page)
    set_value(page, "#whatif-v textarea", "1-1.0")
    wait_text(page, "#whatif-status", "n:cost in plain steps), got '1-1.0'")
    assert whatif_curve(page) == shown and "still show the last inputs that worked" in status(page, "#whatif-status")
    set_value(page, "#whatif-v textarea", "1:1.0,2:1.05,4:1.6")
    page.wait_for_function("!document.querySelector('#whatif-status').innerText.startsWith('\u26a0')")
    page.locator("#whatif-mode label", has_text="per position").click()
    page.wait_for_function("!document.querySelector('#whatif-positions textarea').disabled")
    # Out of [0, 1] in a text box: a number typed into the alpha slider's box may reach the event clamped to the
    # slider's range or as typed, as Gradio's blur and input race (under load it came clamped, with no word)
    set_value(page, "#whatif-positions textarea", "0.9, 1.5")
    wait_text(page, "#whatif-status", "acceptance is a probability in [0, 1], got [0.9, 1.5]")
    set_value(page, "#whatif-positions textarea", "0.9, 0.8, 0.7")
    wait_text(page, "#whatif-status", "per-position acceptance 0.90, 0.80, 0.70")
    page.locator("#whatif-use-calibration").click()  # says where the numbers came from, or that there is none
    page.wait_for_function("/(Filled in|No calibration)/.test(document.querySelector('#whatif-from').innerText)")
    assert "Traceback" not in page.locator("#results").inner_text()
    assert_labels_apart(page, "#whatif-plot")
    page.screenshot(path=str(tmp_path / "whatif.png"), full_page=True)
    print(f"screenshot: {tmp_path / 'whatif.png'}")
    assert not errors, errors


def test_the_sweep_chart_draws_a_labelled_line_per_batch_size(tiny_app_url, page):
    page.goto(tiny_app_url)
    page.locator("#prompt textarea").fill(TINY_PROMPT)
    # one cost per token: a model drafter (a hybrid's batch lines are not drawn: it has no one-c model)
    page.locator("#drafter label", has_text=re.compile(r"^\s*draft model\s*$")).click()
    page.get_by_role("tab", name="k per output shape").click()
    assert "The loop itself runs batch 1" in page.locator("#batch-note").inner_text()
    page.locator("#batch-btn").click()
    wait_status(page, "Timing batches")  # at once, above the tabs
    wait_status(page, "Timed batches 1, 4, 8", "#batch-status")
    wait_status(page, "Timed batches 1, 4, 8")  # and above the tabs once it ended
    note = page.locator("#batch-note").inner_text()
    assert "Sweep k to see" in note and "The loop itself runs batch 1" in note and "vLLM" in note
    page.locator("#sweep-btn").click()
    wait_status(page, "Sweep done", "#sweep-status")
    page.wait_for_selector("#sweep-plot .js-plotly-plot")
    labels = page.eval_on_selector_all("#sweep-plot .annotation-text", "els => els.map(e => e.textContent)")
    assert {"batch 1", "batch 4", "batch 8", "break-even", "adaptive 1.02\u00d7"} <= set(labels), labels
    assert_labels_apart(page, "#sweep-plot")
    wait_text(page, "#batch-note", "draws the predicted speed-up at each batch size")


def test_statuses_say_what_is_true_now(tiny_app_url, page):
    page.goto(tiny_app_url)
    page.locator("#download").click()  # nothing to download before a run, and it says so
    page.wait_for_function("document.querySelector('#status').innerText.startsWith('Nothing to download yet')")
    page.locator("#k input[type=number]").fill("100")  # typed out of range: a message, not a silent clamp
    page.locator("#k input[type=number]").press("Tab")
    page.wait_for_function("document.querySelector('#status').innerText.includes('k must be from 1 to 16, got 100')")
    assert "the slider moved to 16" in status(page)
    page.locator("#k input[type=number]").fill("3")
    page.locator("#k input[type=number]").press("Tab")
    wait_status(page, "Ready")
    page.locator("#max-new input").fill("2.5")
    page.locator("#max-new input").press("Tab")
    page.wait_for_function("document.querySelector('#status').innerText.includes('must be a whole number')")
    page.locator("#max-new input").fill("6")
    page.locator("#max-new input").press("Tab")
    wait_status(page, "Ready")
    page.locator("#prompt textarea").fill("")
    page.locator("#run-btn").click()
    page.wait_for_function("document.querySelector('#status').innerText.includes('the prompt is empty')")
    page.locator("#prompt textarea").press_sequentially("w1 w2")
    wait_status(page, "Ready")  # the old error went with its cause
    page.locator("#run-btn").click()
    wait_status(page, "Done")
    assert page.locator("#tokens .tok").count() == 6
    stop = page.locator("#min-confidence input[type=number]")  # the draft confidence stop: a probability
    stop.fill("1.5")
    stop.press("Tab")
    page.wait_for_function("document.querySelector('#status').innerText.includes('draft confidence stop must be')")
    stop.fill("0.5")
    stop.press("Tab")
    wait_status(page, "Ready")
    page.locator("#run-btn").click()
    wait_status(page, "Done")
    assert "drafting stopped below confidence 0.5" in status(page)
    page.locator("#k-mode label", has_text="adaptive").click()  # a first adaptive run calibrates (seconds here) ...
    page.locator("#decoding-box .label-wrap").first.click()  # ... under a decoding no other test calibrated
    page.locator("#decoding label", has_text="sampling").click()
    page.locator("#temperature input[type=number]").fill("0.93")
    page.locator("#temperature input[type=number]").press("Tab")
    page.locator("#run-btn").click()
    wait_status(page, "Running: calibrating for adaptive k")  # the news in sight, the run's settings in the fold
    assert re.search(r"\d+ s \u2026", page.locator("#status").inner_text())
    wait_status(page, "Done")


@pytest.mark.parametrize("width, height", [(390, 844), (1440, 1000)])
def test_run_and_the_first_result_are_in_the_first_screen(tiny_app_url, browser, width, height, tmp_path):
    page = browser.new_page(viewport={"width": width, "height": height}, has_touch=width < 500)
    page.set_default_timeout(TIMEOUT_MS)
    try:
        page.goto(tiny_app_url)
        page.wait_for_selector("#run-btn")
        assert in_first_screen(page, "#run-btn")  # no scrolling to find Run
        page.locator("#prompt textarea").fill(TINY_PROMPT)
        page.locator("#max-new input").fill("12")
        page.locator("#max-new input").press("Tab")
        page.locator("#run-btn").click()
        wait_status(page, "Done")
        assert in_first_screen(page, "#tokens") and in_first_screen(page, "#status")  # the result is in view
        assert page.evaluate("document.documentElement.scrollWidth") <= width  # nothing sticks out sideways
        if width < 500:  # a tap on a token shows its details (no hover on a touch screen)
            page.locator("#tokens .tok").first.tap()
            assert page.locator("#tokens .tok-detail").inner_text().startswith("iteration 1")
        page.screenshot(path=str(tmp_path / f"run-{width}.png"))
        print(f"screenshot: {tmp_path / f'run-{width}.png'}")
    finally:
        page.close()


def test_closing_the_tab_mid_run_stops_the_run_and_the_next_tab_runs_cleanly(tiny_app_url, browser, slower):
    import threading

    def workers():
        return [t for t in threading.enumerate() if t.name.startswith("playground-")]

    page = browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    start_run(page, tiny_app_url, "200")
    page.wait_for_selector("#tokens .tok")
    assert workers(), "the run should still be going when the tab closes"
    page.close()  # the tab closes mid-run: its event stream and heartbeat drop
    t0 = time.monotonic()
    for t in workers():
        t.join(10)
    assert not workers(), "the closed tab's run should have stopped"
    print(f"closed tab: the engine thread ended {time.monotonic() - t0:.2f} s after the tab closed")

    PASS_S["sleep"] = 0.03
    page = browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        start_run(page, tiny_app_url, "8")
        wait_status(page, "Done")
        assert page.locator("#tokens .tok").count() == 8
    finally:
        page.close()


STARTING_PREFIXES = ("Starting", "Replay: starting", "Sweep k: starting", "Stopping")


def wait_final(page, text: str, selector: str = "#status") -> str:
    """Wait until the status line is a final one (not a 'starting' line) that includes `text`; return it."""
    page.wait_for_function(
        f"(() => {{ const t = document.querySelector({json.dumps(selector)}).innerText;"
        f" return !{json.dumps(STARTING_PREFIXES)}.some(p => t.startsWith(p)) && t.includes({json.dumps(text)}); }})()",
        timeout=60_000)
    return page.locator(selector).inner_text()  # what shows: the fold closed


def test_every_error_path_ends_in_a_status_that_says_what_is_wrong(tiny_app_url, page, tmp_path):
    """Issue 47's stuck and silent paths, clicked as a newcomer would: max new tokens 0 and 999999 (Gradio's own
    range check left 'Starting' for good), k typed 99 and temperature -1 (clamped in silence), and a trace file
    with no turn (the line above the tabs kept 'Replay: starting'). Each ends in a final status of at most 120
    characters that names the field, the range and the value."""
    page.goto(tiny_app_url)
    page.locator("#prompt textarea").fill(TINY_PROMPT)
    seen = []
    for value in ("0", "999999"):
        page.locator("#max-new input").fill(value)
        page.locator("#run-btn").click()  # straight from the box: no Tab first
        seen.append(wait_final(page, f"got {value}"))
        assert "max new tokens must be from 1 to" in seen[-1], seen[-1]
    page.locator("#max-new input").fill("6")
    page.locator("#max-new input").press("Tab")
    page.locator("#k input[type=number]").fill("99")
    page.locator("#k input[type=number]").press("Tab")
    page.wait_for_function("document.querySelector('#status').innerText.includes('the slider moved to 16')")
    page.locator("#run-btn").click()
    seen.append(wait_final(page, "k was typed as 99, outside 1 to 16"))
    page.locator("#run-btn").click()  # the second press runs with what the slider shows
    seen.append(wait_final(page, "Done"))
    fold = page.locator("#status details.status-more")  # the rest of a long line: one tap away, also on a phone
    assert fold.count() == 1 and "drafter hybrid" in fold.text_content() and not fold.evaluate("e => e.open")
    page.locator("#decoding-box .label-wrap").first.click()  # the Decoding fold
    page.locator("#decoding label", has_text="sampling").click()
    page.locator("#temperature input[type=number]").fill("-1")
    page.locator("#temperature input[type=number]").press("Tab")
    page.wait_for_function("document.querySelector('#status').innerText.includes('the slider moved to 0.05')")
    page.locator("#run-btn").click()
    seen.append(wait_final(page, "temperature was typed as -1, outside 0.05 to 2"))
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n \n")
    page.get_by_role("tab", name="Replay").click()
    page.locator("#replay-file input[type=file]").set_input_files(str(blank))
    page.locator("#replay-btn").click()
    seen.append(wait_final(page, "Replay: nothing to replay"))
    assert page.locator('[data-testid="toast-body"]').count() == 0  # each error on the status line, not in toasts
    shown = [visible_line(line) for line in seen]
    assert all(len(line) <= 120 for line in shown), [line for line in shown if len(line) > 120]


def visible_line(text: str) -> str:
    """A status line as read: without Gradio's elapsed-time badge, the fold's 'more' as one word."""
    return re.sub(r"^\d+(\.\d+)?s\s+", "", text).replace("\n\nmore", " more").strip()

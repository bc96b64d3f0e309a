"""The playground in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright):
pick a preset, run, see coloured token spans and live counters, stop a run, get a clear message for
bad input, close a tab mid-run (on a tiny slowed pair) and see its run stop. Saves a screenshot (path
printed; PLAYGROUND_SCREENSHOT=path.png keeps a copy there)."""

from __future__ import annotations

import os
import shutil

import pytest

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage"]
TIMEOUT_MS = 180_000


@pytest.fixture(scope="module")
def app_url(launch_app):
    from playground.ui import build_ui

    return launch_app(build_ui())


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: run scripts/install_browser.sh")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def counter(page, key: str) -> str:
    return page.locator(f'#counters [data-counter="{key}"] .value').inner_text()


@pytest.fixture
def page(browser, tmp_path):
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    yield page
    page.screenshot(path=str(tmp_path / "last.png"), full_page=True)  # the state at the end (or at a failure)
    print(f"last state: {tmp_path / 'last.png'}")
    page.close()


def test_preset_run_shows_coloured_tokens_live_counters_and_charts(app_url, page, tmp_path):
    from playground.inputs.presets import get_preset

    preset = get_preset("tool_call")
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(app_url)
    page.wait_for_selector("#run-btn")
    page.wait_for_selector("#time-plot .js-plotly-plot")  # plotly.js is loaded before any run

    # pick a preset: the prompt box fills with the exact text the model sees, and its description shows
    page.locator("#preset input").click()
    page.get_by_role("option", name=preset.title).click()
    page.wait_for_function("document.querySelector('#prompt textarea').value.includes('<|im_start|>')")
    assert preset.kind in page.locator("#preset-info").inner_text()
    page.locator("#max-new input").fill("14")
    page.locator("#max-new input").press("Tab")
    page.locator("#k-mode label", has_text="adaptive").click()  # k chosen per iteration by the cost model

    # run: tokens stream in as coloured spans; the counters move while it runs
    page.locator("#run-btn").click()
    page.wait_for_selector("#tokens .tok")
    page.wait_for_function(
        "document.querySelector('#counters [data-counter=\"iterations\"] .value').innerText !== '0'")
    page.wait_for_function("document.querySelector('#status').innerText.startsWith('Done')")

    spans = page.locator("#tokens .tok")
    n = spans.count()
    assert counter(page, "new_tokens") == f"{n} / 14"
    assert int(counter(page, "iterations")) >= 1 and counter(page, "tokens_per_s") != "\u2013"
    assert "k = adaptive (chosen: " in page.locator("#status").inner_text()
    roles = page.eval_on_selector_all("#tokens .tok", "els => els.map(e => e.classList[1])")
    assert set(roles) <= {"acc", "cor", "bon", "pln"} and "acc" in roles
    accepted_bg = page.eval_on_selector("#tokens .tok.acc", "e => getComputedStyle(e).backgroundColor")
    assert accepted_bg == "rgb(187, 247, 208)"  # styled, not just tagged
    title = spans.first.get_attribute("title")
    assert title.startswith("iteration 1") and "p(x)" in title
    assert page.locator("#tokens .it").count() == int(counter(page, "iterations"))
    spans.first.hover()
    # charts were drawn from the run, and the JSON output was checked against the preset's schema
    assert page.locator("#time-plot .bars path").count() > 0
    assert page.locator("#pos-plot .bars path").count() > 0
    assert "Output check" in page.locator("#check").inner_text()

    shot = tmp_path / "playground.png"
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    if os.environ.get("PLAYGROUND_SCREENSHOT"):
        shutil.copy(shot, os.environ["PLAYGROUND_SCREENSHOT"])
    assert shot.stat().st_size > 20_000
    assert not errors, errors

    # Back to a fixed k for the rest: adaptive k drafts 16 at a time, and the Stop check below needs a run
    # that is still going when Stop is pressed (the tool-call answer ends at ~26 tokens).
    page.locator("#k-mode label", has_text="fixed k").click()

    # Compare with plain: the speculative run again, then plain decoding right after; the measured ratio shows
    page.locator("#compare-btn").click()
    page.wait_for_function("document.querySelector('#status').innerText.startsWith('Compared')")
    prediction = page.locator("#prediction").inner_text()
    assert "measured" in prediction and "\u00d7" in prediction and "prefill excluded" in prediction

    # Stop cancels a long run and frees the worker: the next event is served at once. A story opening as
    # raw text, so the run does not end at an early end-of-sequence before Stop is pressed.
    page.locator("#prompt textarea").fill("Once upon a time, in a small village by the sea, there lived")
    page.locator("#max-new input").fill("400")
    page.locator("#max-new input").press("Tab")
    page.locator("#run-btn").click()
    page.wait_for_function("document.querySelector('#status').innerText.startsWith('Running')")
    page.wait_for_selector("#tokens .tok")  # the new run's first tokens (the update that said Running cleared them)
    page.locator("#stop-btn").click()
    page.wait_for_function("document.querySelector('#status').innerText.startsWith('Stopped')")
    page.wait_for_timeout(1000)  # the cancelled event closes at its next update (at most ~0.5 s apart)
    n_stopped = page.locator("#tokens .tok").count()
    page.wait_for_timeout(1500)
    assert page.locator("#tokens .tok").count() == n_stopped < 400  # nothing more arrives once stopped
    assert page.locator("#status").inner_text().startswith("Stopped")

    # bad input: a clear message in the page, and the app keeps serving
    page.locator("#prompt textarea").fill("")
    page.locator("#run-btn").click()
    page.wait_for_function("document.querySelector('#status').innerText.includes('the prompt is empty')")
    page.get_by_text("the prompt is empty: type something, or pick a preset").last.wait_for()


@pytest.fixture(scope="module")
def tiny_app_url(launch_app):
    """The app on a tiny random pair whose every forward pass sleeps 30 ms: a 200-token run lasts many seconds."""
    import time

    import torch

    from playground.pairs.models import ModelPair
    from playground.ui import build_ui
    from playground.ui.serving import PairProvider
    from tests.tiny import perturbed, tiny_model, word_tokenizer

    target = tiny_model(vocab=64, seed=0, dtype=torch.float32)
    draft = perturbed(target, noise=0.015)
    for m in (target, draft):
        m.register_forward_pre_hook(lambda *_: time.sleep(0.03))
    pair = ModelPair(target=target, tokenizer=word_tokenizer([f"w{i}" for i in range(63)]), draft=draft,
                     eos_ids=frozenset({63}), target_name="tiny-target", draft_name="tiny-draft")
    return launch_app(build_ui(PairProvider(pair=pair)))


def test_closing_the_tab_mid_run_stops_the_run_and_the_next_tab_runs_cleanly(tiny_app_url, browser):
    import threading
    import time

    def workers():
        return [t for t in threading.enumerate() if t.name.startswith("playground-")]

    def start_run(page, max_new: str):
        page.goto(tiny_app_url)
        page.locator("#prompt textarea").fill("w1 w2 w3 w4 w5 w1 w2 w3")
        page.locator("#max-new input").fill(max_new)
        page.locator("#max-new input").press("Tab")
        page.locator("#run-btn").click()

    page = browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    start_run(page, "200")
    page.wait_for_selector("#tokens .tok")
    assert workers(), "the run should still be going when the tab closes"
    page.close()  # the tab closes mid-run: its event stream and heartbeat drop
    t0 = time.monotonic()
    for t in workers():
        t.join(10)
    assert not workers(), "the closed tab's run should have stopped"
    print(f"closed tab: the engine thread ended {time.monotonic() - t0:.2f} s after the tab closed")

    page = browser.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    try:
        start_run(page, "8")
        page.wait_for_function("document.querySelector('#status').innerText.startsWith('Done')")
        assert page.locator("#tokens .tok").count() == 8
    finally:
        page.close()

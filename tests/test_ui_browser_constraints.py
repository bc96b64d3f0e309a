"""A constrained tool-call run in a real headless Chromium (tests/test_ui_browser.py's browser and page): with
"Constrain to the schema" ticked and the schema + lookup drafter, the tokens the schema forced show in their own
colour with their hover, the Done line says how many it forced, and the output is valid against the schema."""

from __future__ import annotations

import re

import pytest

from tests import test_ui_browser as house
from tests.test_ui_browser import status, wait_status

browser, page = house.browser, house.page  # Debian's chromium with the project's flags, a 1440 px page

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def app_url(launch_app):
    """The app on the embedded target with no draft model (the schema + lookup drafter needs none)."""
    from playground.pairs.loading import load_pair
    from playground.ui import build_ui
    from playground.ui.serving import PairProvider

    return launch_app(build_ui(PairProvider(pair=load_pair(draft=None, progress=None))))


def test_a_constrained_tool_call_shows_forced_tokens_in_their_colour_and_valid_json(app_url, page):
    from playground.inputs.presets import get_preset

    preset = get_preset("tool_call")
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(app_url)
    page.wait_for_selector("#run-btn")
    page.locator("#drafter label").filter(has_text=re.compile(r"^\s*schema \+ lookup\s*$")).click()
    page.locator("#preset input").click()
    page.get_by_role("option", name=preset.title).click()
    page.wait_for_function("document.querySelector('#prompt textarea').value.includes('<|im_start|>')")
    page.locator("#max-new input").fill(str(preset.max_new_tokens))
    page.locator("#max-new input").press("Tab")
    page.locator("#constrain input").check()
    page.locator("#run-btn").click()
    wait_status(page, "Done")

    line = status(page)
    assert "finished by schema" in line and "constrained to the tool_call preset's schema: the schema forced" in line
    forced = page.locator("#tokens .tok.frc")
    assert forced.count() >= 3
    assert page.eval_on_selector("#tokens .tok.frc", "e => getComputedStyle(e).backgroundColor") == \
        "rgb(233, 213, 255)"  # styled, not just tagged
    assert "forced by the schema" in forced.first.get_attribute("title")
    assert "forced by the schema" in page.locator("#legend").inner_text()
    assert "valid against the schema" in page.locator("#check").inner_text()
    assert not errors, errors

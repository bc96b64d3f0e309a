"""The drafter lists the docs keep in prose name exactly the registered drafters (playground.drafters.registry):
the README's "Its drafters:" sentence, docs/cli.md's `--drafter` option and the bullets of docs/drafters.md's
"Drafters". Each list is read by `listed`, which the last test shows fails a list one drafter short or one too
long."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from playground.drafters.registry import names

ROOT = Path(__file__).resolve().parents[1]


def readme_list(text: str) -> list[str]:
    """The backticked names of the README's sentence "Its drafters: ... ." (up to "Named pairs")."""
    sentence = text.split("Its drafters:", 1)[1].split("Named pairs", 1)[0]
    return re.findall(r"`([^`]+)`", sentence)


def cli_list(text: str) -> list[str]:
    """The choices of docs/cli.md's `--drafter auto|...` option, less "auto" (which picks one of them)."""
    (choices,) = re.findall(r"`--drafter (auto\|[^`]+)`", text)
    return choices.split("|")[1:]


def drafters_md_list(text: str) -> list[str]:
    """The drafters given a bullet ("- `name` — ...") in docs/drafters.md's "## Drafters", less "auto"."""
    section = text.split("\n## Drafters\n", 1)[1].split("\n## ", 1)[0]
    return [n for n in re.findall(r"^- `([^`]+)` \u2014", section, flags=re.MULTILINE) if n != "auto"]


LISTS = {
    "README.md": readme_list,
    "docs/cli.md": cli_list,
    "docs/drafters.md": drafters_md_list,
}


def listed(names_in_doc: list[str], registered: list[str]) -> list[str]:
    """What is wrong with a doc's list: registered drafters it leaves out, names it gives that are not one."""
    missing = [n for n in registered if n not in names_in_doc]
    unknown = [n for n in names_in_doc if n not in registered]
    return [f"missing {n}" for n in missing] + [f"not a registered drafter: {n}" for n in unknown]


@pytest.mark.parametrize("page", LISTS)
def test_each_docs_drafter_list_names_every_registered_drafter_and_no_other(page):
    found = LISTS[page]((ROOT / page).read_text(encoding="utf-8"))
    assert not listed(found, names()), f"{page}: {listed(found, names())}"


def test_the_check_fails_a_list_one_short_or_one_too_long():
    registered = names()
    assert listed(registered, registered) == []
    assert listed(registered[:-1], registered) == [f"missing {registered[-1]}"]
    assert listed([*registered, "telepathy"], registered) == ["not a registered drafter: telepathy"]
    old_readme = "Its drafters: `llama.cpp` (x), `draft` (y), `lookup` (z) and `hybrid` (w). Named pairs `--pair`"
    assert listed(readme_list(old_readme), registered) == [f"missing {n}" for n in registered[4:]]
    assert cli_list("Options: `--drafter auto|llama.cpp|draft|lookup|hybrid`,") == ["llama.cpp", "draft", "lookup",
                                                                                     "hybrid"]

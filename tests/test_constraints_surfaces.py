"""Where a constraint shows: the forced role in the token view, its legend and hover, `generate`'s colours and
summary, the Run tab's request, the run document, and the schema+ drafters in the registry."""

from __future__ import annotations

import pytest

from playground.cli.generate import COLOURS, format_summary
from playground.core.records import ACCEPTED, BONUS, FORCED, Iteration, Prefill, summarize
from playground.core.sampling import GREEDY
from playground.document import RunConfig
from playground.drafters import registry
from playground.errors import PlaygroundError
from playground.lab.replay import ReplayOptions
from playground.ui import render
from playground.ui.session import parse_request
from playground.ui.theme import CSS

IT = Iteration(index=0, k=4, proposed=(5, 6, 7, 8), n_accepted=4, emitted=(5, 6, 7, 8, 9),
               roles=(FORCED, FORCED, ACCEPTED, ACCEPTED, BONUS), draft_s=0.0, verify_s=0.01, rollback_s=0.0,
               elapsed_s=0.01, sources=("schema", "schema", "lookup", "lookup"))


def test_forced_tokens_have_their_own_colour_legend_chip_and_hover():
    html = render.records_html([Prefill(3, 0.1), IT])
    assert html.count('class="tok frc') == 2 and html.count('class="tok acc') == 2
    assert "forced by the schema" in html and "no model ran" in html  # the hover: role and source
    legend = render.legend_html()
    assert 'class="tok frc"' in legend and "forced by the schema" in legend
    assert ".tok.frc" in CSS


def test_the_summary_counts_forced_tokens_and_generate_paints_them():
    s = summarize([Prefill(3, 0.1), IT])
    assert s.roles[FORCED] == 2 and s.forced_share == pytest.approx(0.4)
    assert "the schema forced 40% of the tokens" in format_summary(s, "setup")
    assert COLOURS["forced"] not in ("", COLOURS["accepted"])


def test_the_run_tab_constrains_to_a_json_presets_schema_only():
    controls = {"prompt": "x", "preset": "tool_call", "drafter": "schema+lookup", "k": 3, "decoding": "greedy",
                "max_new_tokens": 8, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0, "constrain": True}
    assert parse_request(controls).constrain is True
    assert parse_request({**controls, "constrain": False}).constrain is False
    for preset in ("prose", None, "react"):
        with pytest.raises(PlaygroundError, match="'Constrain to the schema' uses a JSON preset's schema: choose one "
                                                  "of .*tool_call, or untick it"):
            parse_request({**controls, "preset": preset})


def test_the_run_document_records_the_constraint():
    config = RunConfig(prompt_ids=[1], drafter="d", k=2, sampling=GREEDY, max_new_tokens=4,
                       constraint={"name": "the tool_call preset's schema", "library": "llguidance"})
    assert config.to_dict()["constraint"]["library"] == "llguidance"
    assert RunConfig(prompt_ids=[1], drafter="d", k=2, sampling=GREEDY, max_new_tokens=4).to_dict()["constraint"] is None


def test_the_schema_drafters_are_declared_once_and_left_out_of_replays_defaults(pair64):
    specs = {s.name: s for s in registry.drafters() if s.schema}
    assert set(specs) == {"schema+llama.cpp", "schema+draft", "schema+lookup", "schema+suffix"}
    assert all(s.sources[0].name == "schema" for s in specs.values())
    assert {registry.schema_variant(s.inner) for s in specs.values()} == set(specs)  # each over its inner drafter
    assert registry.schema_variant("hybrid") is None
    chosen = ReplayOptions(ks=[2], controllers=()).resolved(pair64).drafters
    assert "lookup" in chosen and not any(d.startswith("schema+") for d in chosen)

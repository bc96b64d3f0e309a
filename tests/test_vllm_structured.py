"""vllm-sweep --structured against real vLLM servers (the shared ones, tests/conftest.py): each JSON preset measured
free and constrained to its schema through OpenAI's response_format, plain and speculative alike, side by side."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from playground.backends.vllm_report import report_text
from playground.backends.vllm_sweep import SweepPlan, run_sweep
from playground.inputs.presets import get_preset
from tests.vllm_servers import NGRAM, needs_vllm

# A tool call's schema written with JSON Schema's if/then (as the tool_call preset's was), which the vLLM CPU
# build's grammar backend refuses ("Unimplemented keys: if, then").
CONDITIONAL = {"type": "object", "required": ["name", "arguments"], "additionalProperties": False, "properties": {"name": {"enum": ["get_weather", "search_flights"]}, "arguments": {"type": "object"}}, "allOf": [{"if": {"properties": {"name": {"const": "get_weather"}}}, "then": {"properties": {"arguments": {"type": "object", "properties": {"location": {"type": "string", "minLength": 1}, "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["location", "unit"], "additionalProperties": False}}}}, {"if": {"properties": {"name": {"const": "search_flights"}}}, "then": {"properties": {"arguments": {"type": "object", "properties": {"origin": {"type": "string", "minLength": 1}, "destination": {"type": "string", "minLength": 1}, "date": {"type": "string", "minLength": 1}}, "required": ["origin", "destination", "date"], "additionalProperties": False}}}}]}


def test_only_json_presets_with_a_schema_get_a_constrained_arm():
    plan = SweepPlan(model=Path("m"), presets=[], structured=True)
    tool, react, prose = get_preset("tool_call"), get_preset("react"), get_preset("prose")
    assert tool.output_format == "json" and react.output_schema is not None
    formats = plan.formats(tool)
    assert formats[0] is None and formats[1]["json_schema"]["schema"] == tool.output_schema
    assert plan.formats(react) == [None] and plan.formats(prose) == [None]  # ReAct's schema is its action input's
    assert SweepPlan(model=Path("m"), presets=[]).formats(tool) == [None]  # without --structured: free only


@needs_vllm
@pytest.mark.slow
def test_a_structured_sweep_measures_free_and_constrained_side_by_side(vllm_servers, vllm_model_dir):
    plain, ngram = vllm_servers["plain"].url, vllm_servers["ngram"].url
    extract = get_preset("json_extract")
    conditional = replace(extract, name="conditional", output_schema=CONDITIONAL)
    plan = SweepPlan(model=Path(vllm_model_dir), presets=[extract, conditional], concurrencies=[1], rounds=1,
                     max_new_tokens=48, external=(plain, ngram, NGRAM), structured=True)
    result = run_sweep(plan, log=lambda _m: None)
    # the server's grammar backend refuses the conditional schema: named, and that preset runs free only
    assert list(result.structured_refused) == ["conditional"] and "if" in result.structured_refused["conditional"]
    free, constrained = ([c for c in result.cells if c.structured is s] for s in (False, True))
    assert [c.preset for c in free] == ["json_extract", "conditional"] and len(constrained) == 1
    cell = constrained[0]
    assert cell.preset == "json_extract" and cell.schema_valid is True
    assert cell.outputs_equal  # greedy: constrained speculative output == constrained plain output
    assert cell.spec.text.lstrip().startswith("{") and cell.speedup and cell.plain.tokens_per_s
    text = report_text(result)
    assert "| output | valid JSON |" in text and "| constrained | 1/1 |" in text and "| free |" in text
    assert "refused a request constrained to conditional's schema" in text

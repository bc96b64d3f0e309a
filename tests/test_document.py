"""The run document: one builder for every export; valid JSON, secrets redacted, built from the records."""

from __future__ import annotations

import json
import math

from playground.core.engine import plain_generate, speculative_generate
from playground.core.records import summarize
from playground.core.sampling import GREEDY
from playground.document import KIND, RunConfig, RunOutcome, run_document
from playground.drafters.proposers import PromptLookupProposer
from playground.envinfo import environment


def test_the_document_holds_the_request_the_records_and_the_measured_speedup(pair64):
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    records = list(speculative_generate(pair64, prompt, proposer=PromptLookupProposer(), k=3, max_new_tokens=10))
    plain = summarize(plain_generate(pair64, prompt, max_new_tokens=10))
    summary = summarize(records)
    config = RunConfig(prompt_ids=prompt, drafter="prompt-lookup", k=3, sampling=GREEDY, max_new_tokens=10)
    doc = run_document(config, RunOutcome(records, environment(pair64), "text", summary=summary, plain_summary=plain))
    assert doc["kind"] == KIND and doc["config"]["k"] == 3 and doc["config"]["k_mode"] == "fixed"
    assert doc["config"]["prompt_ids"] == prompt and doc["config"]["sampling"]["do_sample"] is False
    assert doc["records"][0]["type"] == "Prefill" and len(doc["records"]) == len(records)
    assert doc["summary"]["new_tokens"] == summary.new_tokens
    assert doc["measured_speedup"] == summary.tokens_per_s / plain.tokens_per_s
    json.loads(json.dumps(doc, allow_nan=False))  # strict JSON: no NaN or Infinity anywhere


def test_a_partial_run_and_a_schedule_are_recorded_as_such(pair64):
    config = RunConfig(prompt_ids=[1, 2], drafter="draft", k="adaptive", sampling=GREEDY, max_new_tokens=5)
    doc = run_document(config, RunOutcome([], {"x": math.nan}, ""))
    assert doc["config"]["k_mode"] == "adaptive" and doc["summary"] is None and doc["measured_speedup"] is None
    assert doc["environment"] == {"x": None}


def test_secrets_never_reach_the_document(monkeypatch, pair64):
    secret = "hf_abcdefghijklmnopqrstuvwxyz"
    monkeypatch.setenv("HF_TOKEN", secret)
    config = RunConfig(prompt_ids=[1], drafter="draft", k=1, sampling=GREEDY, max_new_tokens=1,
                       prompt=f"my token is {secret}")
    assert secret not in json.dumps(run_document(config, RunOutcome([], {}, f"echo {secret}")))

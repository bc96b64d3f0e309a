"""The files the app hands out: the run's JSON document (`download_document`, built by playground.document as
every export is) and `save_document`, which writes a document where Gradio serves downloads from.

Every document goes through `playground.envinfo.redact` (in playground.document): no secret (HF_TOKEN,
credentials in a model's name) is ever written out.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid

from ..document import RunConfig, RunOutcome, run_document
from . import verdicts
from .session import RunResult, run_timing

DOWNLOADS_KEPT_S = 24 * 3600  # run files older than this are removed when a new one is written


def jsonable(x):
    """Round-trip through JSON (tuples -> lists, non-string keys -> strings; unknown objects -> str)."""
    return json.loads(json.dumps(x, default=lambda o: o.to_dict() if hasattr(o, "to_dict") else str(o)))


def download_document(run: RunResult, timing=None, trust=None) -> dict:
    """The run as JSON (what the Download button saves): playground.document's builder, the one `generate
    --json` uses, fed from the tab's run; with a Compare, its trust verdict (a lab.trust.Verdict) and what the
    machine's other processes used during both runs."""
    req = run.request
    config = RunConfig(prompt_ids=run.prompt_ids, drafter=run.drafter,
                       k=req.k if req.k_mode == "fixed" else req.k_mode, sampling=run.sampling,
                       max_new_tokens=req.max_new_tokens, prompt=req.prompt, preset=req.preset, chat_template=req.chat,
                       min_confidence=req.min_confidence,
                       constraint=run.constraint.to_dict() if run.constraint is not None else None)
    doc = run_document(config, RunOutcome(run.records, run.environment, run.text, summary=run.summary,
                                          setup=run.setup, check=run.check, plain_summary=run.plain,
                                          plain_gap_s=run.plain_gap_s, calibration=timing))
    machine = {name: load.to_dict() for name, load in (("speculative", run.machine), ("plain", run.plain_machine))
               if load is not None}
    return {**doc, **({"trust": jsonable(trust.to_dict())} if trust is not None else {}), "machine": machine}


def document(store, session) -> dict:
    """The run document of the session's run, with the calibration behind it (the session's, else `store`'s, the
    pair's lab.CalibrationStore) and the Compare's verdict."""
    run = session.run
    timing = run_timing(session, store)
    trust = None if run.plain is None else verdicts.compare_verdict(run, timing,
                                                                    verdicts.compared_prediction(run, timing))
    return download_document(run, timing, trust)


def save_document(doc: dict, stem: str = "run") -> str:
    """Write a JSON document under the temp dir (Gradio serves files from there) and return its path."""
    d = os.path.join(tempfile.gettempdir(), "speculative-playground")
    os.makedirs(d, exist_ok=True)
    cutoff = time.time() - DOWNLOADS_KEPT_S
    for old in os.scandir(d):
        try:
            if old.name.endswith(".json") and old.stat().st_mtime < cutoff:
                os.remove(old.path)
        except OSError:
            pass
    path = os.path.join(d, f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
    return path

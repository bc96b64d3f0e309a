"""The run document: one run as JSON, the same for every export (`generate --json`, the browser's Download).

It holds what reproduces and explains the run: the request, the environment, every record the loop yielded,
the summary built from them, and where they exist a plain run beside it and the calibration behind the
prediction. Secret values (playground.envinfo.redact) never reach it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .core.records import Record, RunSummary, record_to_dict
from .core.sampling import SamplingConfig
from .envinfo import redact
from .inputs.presets import OutputCheck
from .results.environment import Environment

if TYPE_CHECKING:
    from .drafters.adaptive import CostCurve
    from .lab.calibration import Timing  # importing the lab here would import playground.run, which imports this

KIND = "speculative-playground run"


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What was asked for. `k` is an int, 'adaptive' or 'heuristic'; `k_mode` says which ('fixed' for an int)."""

    prompt_ids: Sequence[int]
    drafter: str
    k: int | str
    sampling: SamplingConfig
    max_new_tokens: int
    prompt: str | None = None
    preset: str | None = None
    chat_template: bool | None = None
    min_confidence: float | None = None
    cost_curve: CostCurve | None = None  # when k was chosen per iteration
    constraint: dict | None = None  # a constrained run's schema (constraints.grammar.Grammar.to_dict), None: none

    @property
    def k_mode(self) -> str:
        return "fixed" if isinstance(self.k, int) and not isinstance(self.k, bool) else str(self.k)

    def to_dict(self) -> dict:
        curve = self.cost_curve
        return {
            "prompt": self.prompt,
            "prompt_ids": [int(t) for t in self.prompt_ids],
            "preset": self.preset,
            "chat_template": self.chat_template,
            "drafter": self.drafter,
            "k": self.k,
            "k_mode": self.k_mode,
            "sampling": dataclasses.asdict(self.sampling),
            "max_new_tokens": self.max_new_tokens,
            "min_confidence": self.min_confidence,
            "cost_curve": None if curve is None else {"c": curve.c, "v": {str(n): x for n, x in curve.v.items()},
                                                       "overhead": curve.overhead},
            "constraint": self.constraint,
        }


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """What a run gave and what explains it: every record the loop yielded, the environment it ran in and the text;
    where they exist the summary of the records (None while nothing ran), the setup line, the output check of a
    JSON preset, the summary of a plain run of the same prompt right after (which gives the measured speed-up) and
    the seconds between the two, and the calibration behind the prediction."""

    records: Sequence[Record]
    environment: Environment | dict
    text: str
    summary: RunSummary | None = None
    setup: str | None = None
    check: OutputCheck | None = None
    plain_summary: RunSummary | None = None
    plain_gap_s: float | None = None
    calibration: Timing | None = None


def run_document(config: RunConfig, outcome: RunOutcome) -> dict:
    """The run as a JSON-ready dict: what was asked for (`config`) and what it gave (`outcome`)."""
    summary, plain = outcome.summary, outcome.plain_summary
    speedup = None
    if summary is not None and plain is not None and plain.tokens_per_s:
        speedup = summary.tokens_per_s / plain.tokens_per_s
    check, calibration = outcome.check, outcome.calibration
    return redact(_jsonable({
        "kind": KIND,
        "config": config.to_dict(),
        "environment": outcome.environment,
        "setup": outcome.setup,
        "records": [record_to_dict(r) for r in outcome.records],
        "summary": summary.to_dict() if summary is not None else None,
        "text": outcome.text,
        "output_check": None if check is None else {"is_json": check.is_json, "schema_valid": check.schema_valid,
                                                    "error": check.error},
        "plain_summary": plain.to_dict() if plain is not None else None,
        "plain_gap_s": outcome.plain_gap_s,
        "measured_speedup": speedup,
        "calibration": calibration.to_dict() if calibration is not None else None,
    }))


def _jsonable(x):
    """Round-trip through JSON: tuples become lists, keys strings, NaN null, other objects their to_dict()."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {str(k): clean(val) for k, val in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(val) for val in v]
        return v

    return clean(json.loads(json.dumps(x, default=lambda o: o.to_dict() if hasattr(o, "to_dict") else str(o))))

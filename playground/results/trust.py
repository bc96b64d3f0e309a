"""The trust verdict a result carries, as data: its findings (what was seen and the fix), the verdict over them,
and the machine's load while it was measured. The checks that make findings are lab.trust's; these types live
here so that every result can hold them and be saved with them.

A verdict saves its findings with whether it is trusted and its headline beside them (computed, so that a reader
of the file needs no playground to see the verdict); loading reads the findings back and recomputes the rest."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import ConfigDict, computed_field

FAIL = "fail"
WARN = "warn"


@dataclass(frozen=True)
class TrustLimits:
    """Where a figure stops being trusted. Ratios are relative: (max - min) / median of the samples."""

    drift: float = 0.15  # the plain run's speed between rounds of one prompt
    cell_spread: float = 0.30  # one cell's measured ratio over its rounds (warn), twice that (fail)
    calibration_noise: float = 0.25  # interquartile range / median of one calibration's timed passes (warn; 2x fails)
    min_rounds: int = 3  # fewer rounds warn; one round fails (no spread can be seen)
    other_cores: float = 0.25  # cores other processes kept busy on average while measuring (fail; half of it warns)
    steal: float = 0.05  # share of CPU time the hypervisor took (fail)
    prediction_miss: float = 0.15  # a cell's prediction against its measured median, absolute (warn)


LIMITS = TrustLimits()  # the limits every check applies unless given others


@dataclass(frozen=True)
class Finding:
    check: str  # drift, spread, rounds, calibration-noise, non-physical, slow-drafter, calibration-sampling,
    # machine-load, steal, prediction-miss, prediction-miss-local
    severity: str  # FAIL or WARN
    message: str  # what was seen, with the numbers
    fix: str  # what to do about it

    def to_dict(self) -> dict:
        return {"check": self.check, "severity": self.severity, "message": self.message, "fix": self.fix}


@dataclass(frozen=True)
class Verdict:
    __pydantic_config__ = ConfigDict(serialize_by_alias=True)  # the headline is saved under its own name

    findings: tuple[Finding, ...] = ()

    @computed_field
    @property
    def trusted(self) -> bool:
        return not any(f.severity == FAIL for f in self.findings)

    @computed_field(alias="headline")
    @property
    def headline_text(self) -> str:
        return self.headline()

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == FAIL)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == WARN)

    def headline(self) -> str:
        """One line: 'trusted', 'trusted, with warnings: ...' or 'UNTRUSTWORTHY: reason (fix: ...)'."""
        if self.failures:
            f = self.failures[0]
            more = f" (+{len(self.failures) - 1} more)" if len(self.failures) > 1 else ""
            return f"UNTRUSTWORTHY: {f.message}{more} \u2014 fix: {f.fix}"
        if self.warnings:
            return "trusted, with warnings: " + "; ".join(f.message for f in self.warnings)
        return "trusted"

    def to_dict(self) -> dict:
        return {"trusted": self.trusted, "headline": self.headline(),
                "findings": [f.to_dict() for f in self.findings]}

    @classmethod
    def of(cls, *parts: Verdict | Iterable[Finding] | None) -> Verdict:
        """All findings of the parts, each once, failures first."""
        seen: dict[tuple, Finding] = {}
        for part in parts:
            items = part.findings if isinstance(part, Verdict) else (part or ())
            for f in items:
                seen.setdefault((f.check, f.message), f)
        return cls(tuple(sorted(seen.values(), key=lambda f: f.severity != FAIL)))


@dataclass(frozen=True)
class MachineLoad:
    """What happened on the machine while something was measured."""

    wall_s: float
    other_cores: float  # cores kept busy by other processes, on average (system busy time minus ours)
    steal: float  # share of CPU time taken by the hypervisor
    cores: int
    loadavg: float | None = None

    def findings(self, limits: TrustLimits = LIMITS) -> list[Finding]:
        out = []
        if self.other_cores > limits.other_cores:
            out.append(Finding("machine-load", FAIL, f"other processes kept {self.other_cores:.2f} of the "
                               f"{self.cores} cores busy while this was measured", "stop the other work, or "
                               "measure on a quiet machine (two thread pools on a few cores slow each other "
                               "several-fold)"))
        elif self.other_cores > limits.other_cores / 2:
            out.append(Finding("machine-load", WARN, f"other processes used {self.other_cores:.2f} cores",
                               "measure on a quiet machine"))
        if self.steal > limits.steal:
            out.append(Finding("steal", FAIL, f"the hypervisor took {self.steal:.0%} of CPU time (steal)",
                               "measure on a machine that is not oversubscribed"))
        return out

    def to_dict(self) -> dict:
        return {"wall_s": self.wall_s, "other_cores": self.other_cores, "steal": self.steal, "cores": self.cores,
                "loadavg": self.loadavg}

"""The trust verdict as results hold it: its findings, and whether it is trusted with its one-line headline.

The checks that make the findings are lab.trust's; the verdict itself is plain data, so that every result type
(declared in this package, which imports no lab module) can hold one. A verdict saves as it always did:
`trusted` and `headline` beside the findings, though only the findings are read back (the rest follows)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import TypeAdapter
from pydantic_core import core_schema

FAIL = "fail"
WARN = "warn"


@dataclass(frozen=True)
class Finding:
    check: str  # drift, spread, rounds, calibration-noise, non-physical, slow-drafter, calibration-sampling,
    # machine-load, steal
    severity: str  # FAIL or WARN
    message: str  # what was seen, with the numbers
    fix: str  # what to do about it

    def to_dict(self) -> dict:
        return {"check": self.check, "severity": self.severity, "message": self.message, "fix": self.fix}


@dataclass(frozen=True)
class Verdict:
    findings: tuple[Finding, ...] = ()

    @property
    def trusted(self) -> bool:
        return not any(f.severity == FAIL for f in self.findings)

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
    def from_dict(cls, d: dict | None) -> Verdict:
        """A saved verdict (`to_dict`'s form) back; none saved: trusted, no findings."""
        return TypeAdapter(cls).validate_python(d) if d else cls()

    @classmethod
    def of(cls, *parts: Verdict | Iterable[Finding] | None) -> Verdict:
        """All findings of the parts, each once, failures first."""
        seen: dict[tuple, Finding] = {}
        for part in parts:
            items = part.findings if isinstance(part, Verdict) else (part or ())
            for f in items:
                seen.setdefault((f.check, f.message), f)
        return cls(tuple(sorted(seen.values(), key=lambda f: f.severity != FAIL)))

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        """Read back from the findings (pydantic's dataclass schema); saved as `to_dict`, headline and all."""
        schema = handler(source)
        schema["serialization"] = core_schema.plain_serializer_function_ser_schema(cls.to_dict)
        return schema

"""The trust verdict that travels with every figure: may this number be believed, and if not, why and what to do.

A figure is untrustworthy when what it is made of moved more than the effect it claims: the plain run it is
divided by drifted, the cell's own rounds disagree, the calibration behind its prediction is noisy or
non-physical, other processes took the cores while it was measured, or there were too few rounds to see a
spread at all. Each check gives a `Finding` with the numbers and the fix; a `Verdict` is trusted when no finding
fails. A failed verdict never becomes a recommendation (see `recommend`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import psutil

from ..results.speed import MissSplit
from ..results.trust import FAIL, LIMITS, WARN, Finding, MachineLoad, TrustLimits, Verdict


def relative_spread(xs: Sequence[float]) -> float:
    """(max - min) / median: how far a set of figures moved, as every verdict here measures it."""
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return 0.0
    med = statistics.median(xs)
    return (max(xs) - min(xs)) / med if med else 0.0


def check_rounds(rounds: int, limits: TrustLimits = LIMITS) -> list[Finding]:
    if rounds < 2:
        return [Finding("rounds", FAIL, f"{rounds} round: a single run has no spread, so noise cannot be told "
                        "from an effect", f"run at least {limits.min_rounds} rounds")]
    if rounds < limits.min_rounds:
        return [Finding("rounds", WARN, f"only {rounds} rounds", f"run {limits.min_rounds} or more rounds")]
    return []


def check_drift(prompt: str, plain_tokens_per_s: Sequence[float], limits: TrustLimits = LIMITS,
                load: MachineLoad | None = None) -> list[Finding]:
    """A plain run that moved between rounds. With the `load` it was measured under: when nothing else on the
    machine was busy and the hypervisor took nothing, the fix says so, since "a quiet machine" is then no advice
    (on a shared host the machine under the VM changes speed on its own: docs/results.md, on an AMD EPYC)."""
    return _moved(plain_tokens_per_s, prompt, f"{min(plain_tokens_per_s):.1f}-{max(plain_tokens_per_s):.1f} tokens/s",
                  limits, load)


def check_host_level(levels: Sequence[float], prompts: int, limits: TrustLimits = LIMITS,
                     load: MachineLoad | None = None) -> list[Finding]:
    """The host's plain level over every prompt (lab.speed.cells.host_level: each round's median of the prompts'
    plain speeds, each relative to its own median) that moved between rounds: the machine changed under all of
    them, so every figure over them fails."""
    return _moved(levels, f"the {prompts} prompts",
                  f"their median against each prompt's own: {min(levels):.2f}-{max(levels):.2f}", limits, load)


def _moved(values: Sequence[float], what: str, span: str, limits: TrustLimits, load: MachineLoad | None) -> list[Finding]:
    """The drift finding where plain speeds (or levels) `values` of `what` moved past the limit; `span` shows them."""
    moved = relative_spread(values)
    if moved <= limits.drift:
        return []
    return [Finding("drift", FAIL, f"plain decoding of {what} moved {moved:.0%} between rounds ({span}), more than "
                    f"{limits.drift:.0%}", _drift_fix(limits, load))]


def _drift_fix(limits: TrustLimits, load: MachineLoad | None) -> str:
    if load is not None and load.other_cores <= limits.other_cores / 2 and load.steal <= limits.steal:
        return (f"nothing else on this machine was busy ({load.other_cores:.2f} cores) and steal was "
                f"{load.steal:.0%}, so the host under it changed speed: run more rounds, or measure on a dedicated "
                "host")
    return "measure on a quiet machine, with more rounds"


def check_spread(label: str, ratios: Sequence[float], limits: TrustLimits = LIMITS) -> list[Finding]:
    s = relative_spread(ratios)
    if s > 2 * limits.cell_spread:
        sev = FAIL
    elif s > limits.cell_spread:
        sev = WARN
    else:
        return []
    return [Finding("spread", sev, f"{label}: its rounds spread {s:.0%} ({min(ratios):.2f}-{max(ratios):.2f}x)",
                    "run more rounds on a quiet machine")]


def _parts(explained: MissSplit) -> list[tuple[float | None, str, str]]:
    """The three parts of a miss (lab.fit.explain_cell) with their names and fixes."""
    return [(explained.step_costs, "step costs", ("the loop paid other step costs than the calibration measured: "
                                                  "calibrate again on a quiet machine, right before the rounds")),
            (explained.acceptance, "acceptance model", ("the acceptance differed from round to round or from what "
                                                        "the model assumes: run more rounds, or longer runs")),
            (explained.overhead, "overhead", "time outside the draft, verify and rollback buckets: see the time split")]


def check_prediction(label: str, miss: float | None, explained: MissSplit | None = None,
                     limits: TrustLimits = LIMITS) -> list[Finding]:
    """A cell whose prediction missed its measured median by more than `limits.prediction_miss`, with the part of the
    miss that lab.fit's decomposition puts most of it in (`explained`: explain_cell's means) and that part's fix."""
    if miss is None or abs(miss) <= limits.prediction_miss:
        return []
    message = f"{label}: the prediction missed the measured median by {miss:+.2f}"
    fix = "read 'why each prediction missed'; calibrate again on a quiet machine and run more rounds"
    if explained:
        part, name, fix = max(_parts(explained), key=lambda p: abs(p[0] or 0.0))
        message += f", most of it in the {name} ({part:+.2f})"
    return [Finding("prediction-miss", WARN, message, fix)]


def check_local_prediction(label: str, miss: float | None, limits: TrustLimits = LIMITS) -> list[Finding]:
    """A cell whose prediction from the other arms' costs in each round (lab.fit.predict_from_neighbours) missed
    by more than `limits.prediction_miss`. That prediction walks each run with its own acceptance, and with the
    run's own costs the walk lands within a hundredth of what it measured (2026-12-04, AMD EPYC), so what is left
    is the run paying other step costs than the runs around it: the host moved within the round."""
    if miss is None or abs(miss) <= limits.prediction_miss:
        return []
    return [Finding("prediction-miss-local", WARN, f"{label}: the prediction from the other arms' costs missed the "
                    f"measured median by {miss:+.2f}: its runs paid other step costs than the runs around them",
                    "run more rounds on a quiet machine; the host moved within a round")]


def check_calibration(timing, limits: TrustLimits = LIMITS) -> list[Finding]:
    """A calibration (lab.calibration.Timing) whose costs are non-physical, noisy, or a drafter that cannot pay."""
    out = []
    c, v = timing.c, getattr(timing, "v_measured", timing.v)
    if c >= 1.0:
        out.append(Finding("slow-drafter", FAIL, f"the drafter costs c = {c:.2f} target steps per token: it is "
                           "slower than the target, so drafting cannot pay", "use a faster drafter (llama.cpp, "
                           "prompt lookup) or check the machine for other load"))
    for n, x in sorted(v.items()):
        if x < 0.7 or x > 1.5 * n + 0.5:
            out.append(Finding("non-physical", FAIL, f"a target pass over {n} tokens measured {x:.2f} plain steps "
                               f"(physical: about 1 to {n})", "recalibrate on a quiet machine"))
            break
    noisy = []
    # The passes as predictions use them: each over its repetition's plain step where the calibration kept that.
    for n, xs in (timing.raw.pass_ratio or timing.raw.target_pass_s).items():
        if len(xs) >= 4:
            q = statistics.quantiles(xs, n=4)
            med = statistics.median(xs)
            if med > 0:
                noisy.append(((q[2] - q[0]) / med, int(n)))
    if noisy:
        worst, n = max(noisy)
        if worst > limits.calibration_noise:
            sev = FAIL if worst > 2 * limits.calibration_noise else WARN
            out.append(Finding("calibration-noise", sev, f"the calibration's passes over {n} tokens spread "
                               f"{worst:.0%} (interquartile range / median)", "recalibrate on a quiet machine"))
    return out


def check_sampling(timing, run_sampling: str) -> list[Finding]:
    """A prediction from a calibration timed under another decoding than the run's (labels as
    SamplingConfig.timing_label gives them): a sampled run does the warpers, softmax and draws in every pass
    and proposal, a greedy one does not, so the pairing is non-physical in the way that matters here."""
    timed = getattr(timing, "sampling", "greedy")
    if timed == run_sampling:
        return []
    if timed == "greedy":
        what = "the prediction leaves out the sampling work"
    elif run_sampling == "greedy":
        what = "the prediction counts sampling work the run does not do"
    else:
        what = "the prediction counts another decoding's sampling work"
    return [Finding("calibration-sampling", WARN, f"calibrated under {timed}, run {run_sampling}: {what}",
                    "calibrate with the run's sampling settings")]


# --- the machine: other processes and the hypervisor ------------------------------------------------------


@dataclass
class MachineMonitor:
    """Measures other processes' CPU use over a window: system-wide busy CPU time minus this process's own
    (all its threads: torch's and llama.cpp's pools), from psutil's counters; and the hypervisor's steal.

        with MachineMonitor() as m:
            ...measure...
        m.load.findings()"""

    load: MachineLoad | None = None
    _start: tuple = field(default=(), repr=False)

    @staticmethod
    def _sample():
        sys_t = psutil.cpu_times()
        busy = sum(getattr(sys_t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq"))
        total = busy + sum(getattr(sys_t, f, 0.0) for f in ("idle", "iowait", "steal"))
        own = psutil.Process().cpu_times()
        return time.perf_counter(), busy, total, getattr(sys_t, "steal", 0.0), own.user + own.system

    def __enter__(self):
        self._start = self._sample()
        return self

    def __exit__(self, *exc) -> None:
        self.load = self.stop()

    def stop(self) -> MachineLoad:
        t0, busy0, total0, steal0, own0 = self._start
        t1, busy1, total1, steal1, own1 = self._sample()
        wall = max(t1 - t0, 1e-9)
        others = max(0.0, (busy1 - busy0) - (own1 - own0)) / wall
        total = total1 - total0
        try:
            loadavg = psutil.getloadavg()[0]
        except (AttributeError, OSError):
            loadavg = None
        self.load = MachineLoad(wall_s=wall, other_cores=others, steal=(steal1 - steal0) / total if total > 0 else 0.0,
                                cores=psutil.cpu_count() or 1, loadavg=loadavg)
        return self.load


@dataclass(frozen=True)
class Recommendation:
    recommended_k: int | str | None  # None: withheld
    withheld: str | None  # why, with the fix


def recommend(k: int | str | None, verdict: Verdict) -> Recommendation:
    """A recommended k only from a trusted figure; otherwise none, with the reason and the fix."""
    if verdict.trusted:
        return Recommendation(k, None)
    f = verdict.failures[0]
    return Recommendation(None, f"{f.message} \u2014 fix: {f.fix}")

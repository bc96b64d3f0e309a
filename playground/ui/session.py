"""What one browser tab asks for and remembers.

A `RunRequest` (and `SweepRequest`) is the only thing that crosses from the layout (blocks.py) to the events:
`parse_request` / `parse_sweep` build one from the controls' raw values, by name, and are where bad input is
refused, with a `PlaygroundError` that says what to fix; an event trusts the request it is given. A `Session` is
held per tab in a `gr.State`, never in module globals. `SHOW_ME` is the example the page opens on: one click shows
every token role.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..constraints.schema import schema_presets
from ..core.engine import check_k, check_request
from ..core.records import Iteration, RunSummary
from ..core.sampling import SamplingConfig
from ..drafters.conversation import Conversation
from ..drafters.registry import EXAMPLE_DRAFTER
from ..drafters.registry import names as drafter_names
from ..errors import PlaygroundError
from ..inputs.presets import OutputCheck, Preset
from ..inputs.text import check_prompt_text
from ..lab.calibration import CalibrationStore, Timing
from ..limits import Limits
from ..pairs.registry import PairChoice
from ..results.calibration import BatchResult
from ..results.speed import SweepResult
from ..run import RunSpec, find_timing, prompt_key, resolve_prompt
from .form import Controls, Widget

if TYPE_CHECKING:
    from ..constraints.grammar import Grammar
    from ..results.trust import MachineLoad

DECODINGS = ("greedy", "sample")
K_MODES = {"fixed": "the k above, every iteration", "adaptive": "chosen per iteration by the cost model",
           "heuristic": "transformers' heuristic schedule (+2 / -1)"}
SWEEP_K_MAX = 16
SWEEP_ROUNDS_MAX = 20

# The example the page opens on. Greedy, so the same tokens every time: on the embedded pair the hybrid drafter
# (prompt lookup where the last tokens occurred before, llama.cpp otherwise) copies list items from the prompt,
# has some of them corrected, and gets bonus tokens: every role shows in one run of a few seconds.
SHOW_ME = Controls(
    prompt=("Here is a to-do list: call the bank, buy milk, email Sara, fix the bike, book the dentist. Repeat "
            "the list in the same order, then add one more task."),
    chat=True, drafter=EXAMPLE_DRAFTER, k=4, k_mode="fixed", decoding="greedy", max_new_tokens=60,
)
SHOW_ME_NOTE = ("**Example** (**Show me** brings it back and runs it): a list copied from the prompt and extended, with the hybrid "
                "drafter at k = 4, greedy: copied, accepted, corrected and bonus tokens all show. Press **Run**, or "
                "pick a preset: it fills the prompt with the exact text the model sees.")


# --- the request --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRequest:
    """One speculative run as asked for, validated: what the run, compare and calibrate events read."""

    prompt: str
    preset: str | None
    chat: bool
    drafter: str
    k: int
    max_new_tokens: int
    sampling: SamplingConfig
    k_mode: str = "fixed"  # "fixed" (the k slider), "adaptive" or "heuristic" (k chosen per iteration)
    min_confidence: float | None = None  # a model drafter stops after a token it gave less (None: draft all k)
    constrain: bool = False  # every token masked by the preset's JSON schema ("Constrain to the schema")

    def spec(self) -> RunSpec:
        """The run this request asks for, as playground.run takes it."""
        return RunSpec(drafter=self.drafter, k=self.k if self.k_mode == "fixed" else self.k_mode,
                       sampling=self.sampling, max_new_tokens=self.max_new_tokens, prompt=self.prompt,
                       preset=self.preset, chat=self.chat, min_confidence=self.min_confidence,
                       schema=self.preset if self.constrain else None)


@dataclass(frozen=True)
class SweepRequest:
    """A sweep of k = 1..k_max over `rounds` rounds, with the prompt, drafter and decoding of `run` (with its
    `constrain`, each run is run again constrained to the preset's schema)."""

    run: RunRequest
    k_max: int
    rounds: int


def _integer(value, what: str) -> int:
    if isinstance(value, bool):
        raise PlaygroundError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return _integer(float(value), what) if "." in value or "e" in value.lower() else int(value.strip())
        except ValueError:
            pass
    raise PlaygroundError(f"{what} must be a whole number, got {value!r}")


def _number(value, what: str) -> float:
    if isinstance(value, bool) or value is None:
        raise PlaygroundError(f"{what} must be a number, got {value!r}")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise PlaygroundError(f"{what} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise PlaygroundError(f"{what} must be a finite number, got {value!r}")
    return x


def parse_request(controls: Controls | Mapping[str, Widget], drafters: Sequence[str] | None = None,
                  limits: Limits | None = None) -> RunRequest:
    """The controls' raw values, by name (prompt, preset, chat, drafter, k, decoding, temperature, top_k,
    top_p, max_new_tokens, seed, k_mode: "fixed" when missing, min_confidence: 0 or missing for none, constrain:
    true to mask every token by the preset's JSON schema) -> a RunRequest; raises PlaygroundError with what to
    fix. `drafters`: the names this pair offers (default: every drafter). `limits` (a playground.limits.Limits)
    default to the environment's, read now."""
    c = Controls.of(controls)
    limits = limits or Limits.from_env()
    prompt, preset = c.prompt, c.preset
    check_prompt_text(prompt, limits.max_prompt_chars)
    if preset is not None and not isinstance(preset, str):
        raise PlaygroundError(f"the preset must be a preset name, got {preset!r}")
    known = list(drafters) if drafters is not None else drafter_names()
    drafter = c.drafter
    if drafter not in known:
        raise PlaygroundError(f"unknown drafter {drafter!r}; choose one of {', '.join(known)}")
    k = check_k(_integer(c.k, "k"))
    k_mode = c.k_mode or "fixed"
    if k_mode not in K_MODES:
        raise PlaygroundError(f"k per iteration must be one of {', '.join(K_MODES)}, got {k_mode!r}")
    decoding = c.decoding
    if decoding not in DECODINGS:
        raise PlaygroundError(f"decoding must be 'greedy' or 'sample', got {decoding!r}")
    max_new = limits.check_max_new_tokens(_integer(c.max_new_tokens, "max new tokens"))
    seed = _integer(c.seed, "seed")
    sample = decoding == "sample"
    sampling = SamplingConfig(do_sample=sample,
                              temperature=_number(c.temperature, "temperature") if sample else 1.0,
                              top_k=_integer(c.top_k, "top-k") if sample else 0,
                              top_p=_number(c.top_p, "top-p") if sample else 1.0, seed=seed)
    constrain = bool(c.constrain)
    if constrain and preset not in schema_presets():
        raise PlaygroundError("'Constrain to the schema' uses a JSON preset's schema: choose one of "
                              f"{', '.join(schema_presets())}, or untick it")
    return RunRequest(prompt=prompt, preset=preset or None, chat=bool(c.chat), drafter=drafter, k=k,
                      max_new_tokens=max_new, sampling=sampling, k_mode=k_mode,
                      min_confidence=_confidence_stop(c.min_confidence), constrain=constrain)


def _confidence_stop(value) -> float | None:
    """The draft confidence stop as typed: empty or 0 is off (None: every k drafted, as a stop at 0 would)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    x = _number(value, "the draft confidence stop")
    if not 0.0 <= x <= 1.0:
        raise PlaygroundError(f"the draft confidence stop is a probability from 0 to 1 (0: off, draft all k), "
                              f"got {x:g}")
    return x or None


def stop_text(min_confidence: float | None) -> str:
    """How a status line names a confidence stop: '' without one."""
    return "" if min_confidence is None else f"drafting stopped below confidence {min_confidence:g}"


def parse_sweep(controls: Controls | Mapping[str, Widget], drafters: Sequence[str] | None = None,
                limits: Limits | None = None) -> SweepRequest:
    """The sweep's controls (the run's but k and k_mode, plus k_max and rounds) -> a SweepRequest."""
    controls = Controls.of(controls)
    k_max = _integer(controls.k_max, "largest k")
    if not 1 <= k_max <= SWEEP_K_MAX:
        raise PlaygroundError(f"the largest k to sweep must be from 1 to {SWEEP_K_MAX}, got {k_max}")
    rounds = _integer(controls.rounds, "rounds")
    if not 1 <= rounds <= SWEEP_ROUNDS_MAX:
        raise PlaygroundError(f"rounds must be from 1 to {SWEEP_ROUNDS_MAX}, got {rounds}")
    limits = limits or Limits.from_env()
    limits.check_sweep(k_max, rounds)
    run = parse_request(controls.but(k=1, k_mode="fixed"), drafters, limits)
    return SweepRequest(run=run, k_max=k_max, rounds=rounds)


# --- the request's prompt -----------------------------------------------------------------------------------


def encode_request(pair, req: RunRequest, new_tokens: int, limits: Limits):
    """(prompt ids, preset or None) of a request, checked to leave room for `new_tokens` after the prompt."""
    ids, preset = resolve_prompt(pair, req.spec())
    limits.check_prompt_tokens(len(ids))
    check_request(pair, ids, new_tokens)
    return ids, preset


# --- per-session state --------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """One speculative run, as the session keeps it (records are the truth; the summary is derived)."""

    request: RunRequest
    prompt_ids: list[int]
    drafter: str  # proposer.describe()
    records: list
    summary: RunSummary | None  # None until its records are first summarized
    text: str
    preset: Preset | None
    check: OutputCheck | None
    setup: str
    environment: dict
    finished: bool  # False while streaming (or if it was stopped)
    ended_at: float = 0.0  # time.perf_counter() when the last record arrived
    plain: RunSummary | None = None  # the plain run right after ("Compare with plain")
    plain_gap_s: float | None = None  # seconds between the speculative run's end and the plain run's start
    plain_setup: str | None = None
    machine: MachineLoad | None = None  # other processes' CPU use during the speculative run
    plain_machine: MachineLoad | None = None  # ... and during the plain run after it
    streamed: bool = True  # tokens drawn while it decoded (False: Compare's run, drawn at the end)
    tokens_html: str | None = None  # a run not streamed: its tokens so far, for the page if it is stopped
    constraint: Grammar | None = None  # a constrained run's grammar ("Constrain to the schema"), else None

    @property
    def sampling(self) -> SamplingConfig:
        return self.request.sampling

    @property
    def prompt_key(self) -> str:
        return prompt_key(self.prompt_ids)

    @property
    def measured_speedup(self) -> float | None:
        """Speculative tokens/s over the plain run's, once both exist (None when plain measured 0 tokens/s)."""
        if self.plain is None or self.summary is None:
            return None
        return self.summary.tokens_per_s / self.plain.tokens_per_s if self.plain.tokens_per_s else None


@dataclass
class Session:
    """Everything one browser tab remembers, held in a gr.State (never in module globals)."""

    run: RunResult | None = None
    sweep: SweepResult | None = None
    stopped: str | None = None  # which event the user stopped ("run", "compare", ...), until reported
    pair: PairChoice | None = None  # the pair this tab chose in the pair menu (None: the app's default pair)
    calibration: tuple | None = None  # (drafter, lab.Timing) of this tab's last Calibrate, for the prediction panel
    sweep_status: str | None = None  # the last sweep's outcome, for the status line above the tabs
    batch: BatchResult | None = None  # lab.batch.batch_timing's result of this tab's "Time batches" (+ "setup"), for the sweep
    batch_status: str | None = None  # ... and its outcome, for the status line above the tabs
    whatif_from: tuple | None = None  # (calibration, run) the What-if tab was last filled from (ui/whatif_view.py)
    whatif_refused: tuple | None = None  # (the library's message, the slider's bound) after an alpha out of range
    conversation: Conversation = field(default_factory=Conversation)
    """This tab's runs on its pair, as an agent's earlier calls: the drafters' memories, the k controllers' state
    (per drafter) and the calibrations this tab made or reused ((drafter, prompt_key) -> lab.Timing)."""

    @property
    def timings(self) -> dict:
        return self.conversation.timings


def new_session() -> Session:
    return Session()


def is_nearest(timing: Timing | None, context_tokens: int) -> bool:
    """Whether `timing` was made on another context-length bucket than this context's (a stand-in)."""
    return timing is not None and CalibrationStore.bucket(timing.context_tokens) != CalibrationStore.bucket(
        context_tokens)


def run_timing(session: Session, store: CalibrationStore | None) -> Timing | None:
    """The calibration behind the prediction for the session's run, timed under the run's sampling and reaching
    its deepest pass (k + 1 tokens at a fixed k; where k varied, the most it drafted + 1); None when there is none."""
    run = session.run
    if run is None:
        return None
    deepest = run.request.k if run.request.k_mode == "fixed" else max(
        (len(r.proposed) for r in run.records if isinstance(r, Iteration)), default=0)
    return find_timing(session.conversation, store, run.drafter, run.prompt_ids, deepest + 1, run.request.sampling)

"""One way to run: `prepare(pair, spec)` -> `PreparedRun`; `.records()` streams; `.finish()` gives the rest.

The CLI's `generate` (printing), the browser's Run tab (ui/run_panel.py: streaming) and the lab's speed arms
(lab/speed: headless, many in a row) all run through here, so each gets the same prompt resolution, limits, drafter
memory, calibration for adaptive k, k controller, output check and run document.

- `RunSpec`: what was asked for, as data (a prompt's text or a preset, or ids; the drafter; k; decoding; a schema).
- `prepare` resolves the prompt to ids within the limits and the target's context, compiles the schema, builds the
  proposer over the conversation's memory of this drafter, and finds the calibration adaptive k needs (the
  conversation's own for this prompt, else the pair's store for this context length or the nearest one).
- `PreparedRun.calibrate(progress)` times the pair when adaptive k found none; `records()` calls it first if no one
  did, so a caller who shows progress calls it itself (the browser does, on its worker thread, under the device's
  lock), then builds the k controller over the conversation's memory and streams the loop's records.
- `PreparedRun.finish()` -> `Finished`: the text, the output check (the preset's, else the schema's), the summary,
  and `document(...)`, the run's JSON document (playground.document, which every export goes through).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from .core.engine import DEFAULT_OPTIONS, HEADLESS, K_MAX, check_request, speculative_generate
from .core.records import Iteration, RunSummary, summarize
from .core.sampling import GREEDY, SamplingConfig
from .document import RunConfig, RunOutcome, run_document
from .drafters.adaptive import CostCurve, make_controller
from .drafters.conversation import Conversation
from .envinfo import describe_setup, environment
from .errors import PlaygroundError
from .inputs.presets import OutputCheck, Preset, check_output, get_preset
from .inputs.text import encode_prompt
from .lab.calibration import SHORT_CALIBRATION, CalibrationStore, Timing, calibrated_timing
from .lab.common import Progress
from .limits import Limits

DEFAULT_NEW_TOKENS = 64  # a typed prompt's new tokens when none are asked for (a preset brings its own)
CALIBRATING = "calibrating for adaptive k"  # the phase a first adaptive run begins with, on a status line


@dataclass(frozen=True)
class RunSpec:
    """One speculative run as asked for. The prompt is `prompt_ids`, else the preset's exact ids when `prompt` is
    None or still its text, else `prompt` encoded (through the chat template when `chat`). `k`: an int, 'adaptive'
    or 'heuristic'. `schema`: what constraints.schema_from takes (a preset's name, a file, JSON), or a grammar
    already compiled for the pair's tokenizer; every token is then masked by it."""

    drafter: str
    k: int | str = 4
    sampling: SamplingConfig = GREEDY
    max_new_tokens: int | None = None  # None: the preset's, else DEFAULT_NEW_TOKENS, within the limits
    prompt: str | None = None
    preset: str | None = None
    chat: bool | None = True  # None: no template was asked about (a preset's own ids); the document says so
    prompt_ids: Sequence[int] | None = None
    min_confidence: float | None = None  # a model drafter stops drafting after a token it gave less
    schema: object | None = None
    drafter_options: Mapping = field(default_factory=dict)  # the drafter's build options (the CLI's max_ngram)
    headless: bool = False  # no p(x), q(x) per proposal: nobody reads hover text (the lab)

    @property
    def k_mode(self) -> str:
        return "fixed" if isinstance(self.k, int) and not isinstance(self.k, bool) else str(self.k)


def prompt_key(ids: Sequence[int]) -> str:
    """A prompt's ids as a short key: a conversation's calibrations are kept per drafter and prompt."""
    return hashlib.sha256(",".join(str(int(t)) for t in ids).encode()).hexdigest()[:16]


def resolve_prompt(pair, spec: RunSpec) -> tuple[list[int], Preset | None]:
    """(prompt ids, preset or None): the preset's exact ids while the prompt is absent or still the preset's text."""
    preset = get_preset(spec.preset) if spec.preset else None
    if spec.prompt_ids is not None:
        return [int(t) for t in spec.prompt_ids], preset
    if pair.tokenizer is None:
        raise PlaygroundError("this model pair has no tokenizer, so a text prompt cannot be encoded")
    if preset is not None and (spec.prompt is None or _is_text_of(preset, spec.prompt, pair.tokenizer)):
        return preset.prompt_ids(pair.tokenizer), preset
    return encode_prompt(pair.tokenizer, spec.prompt or "", chat=bool(spec.chat)), preset


def _is_text_of(preset: Preset, prompt: str, tokenizer) -> bool:
    """Whether `prompt` is still the preset's exact text (one the tokenizer cannot template never is)."""
    try:
        return prompt == preset.prompt_text(tokenizer)
    except PlaygroundError:
        return False


def nearest_timing(store: CalibrationStore, drafter: str, context_tokens: int, n_needed: int = 1,
                   sampling: SamplingConfig = GREEDY) -> Timing | None:
    """The pair's calibration of this drafter and decoding on the bucket nearest this context length (in doublings,
    the shorter on a tie): a step's cost changes slowly with the context, so a neighbour's stands in until this
    length is calibrated."""
    bucket = CalibrationStore.bucket(context_tokens)
    for d in range(1, 13):
        for other in (bucket >> d, bucket << d):
            timing = store.get(drafter, other, n_needed, sampling) if other >= 64 else None
            if timing is not None:
                return timing
    return None


def find_timing(conversation: Conversation, store: CalibrationStore | None, drafter: str, ids: Sequence[int],
                n_needed: int = 1, sampling: SamplingConfig = GREEDY, nearest: bool = True) -> Timing | None:
    """The calibration of this drafter on this context, under `sampling`, reaching passes of `n_needed` tokens:
    the conversation's own for this very prompt, else the pair's (shared by every tab) for this context length,
    else (with `nearest`) the pair's for the nearest calibrated length, else None. A greedy calibration never
    stands for a sampled run, nor the reverse."""
    timing = conversation.timings.get((drafter, prompt_key(ids)))
    if timing is not None and not (max(timing.verify_s) >= n_needed and timing.sampling == sampling.timing_label()):
        timing = None
    if timing is None and store is not None:
        timing = store.get(drafter, len(ids), n_needed, sampling)
        if timing is None and nearest:
            timing = nearest_timing(store, drafter, len(ids), n_needed, sampling)
    return timing


@dataclass
class Finished:
    """What a run gave: its text, the output check (None: nothing to check), and the summary of its records."""

    text: str
    check: OutputCheck | None
    summary: RunSummary


def confidence_stop(value: float | None, proposer) -> float | None:
    """The draft confidence stop `proposer` runs with: none for a drafter with no probabilities to stop on (prompt
    lookup), so that neither the page nor the run's record claims a stop that did nothing."""
    return value if getattr(proposer, "confidence_stops", False) else None


class PreparedRun:
    """A run ready to go (see the module docstring). `kept`: every record `records()` yielded so far."""

    def __init__(self, pair, spec: RunSpec, conversation: Conversation, store: CalibrationStore | None,
                 proposer, timing: Timing | None):
        self.pair, self.spec, self.conversation, self.store = pair, spec, conversation, store
        self.prompt_ids, self.preset = resolve_prompt(pair, spec)
        self.proposer = proposer if proposer is not None else conversation.proposer(pair, spec.drafter,
                                                                                  **spec.drafter_options)
        self.drafter = self.proposer.describe()
        self.spec = spec = replace(spec, min_confidence=confidence_stop(spec.min_confidence, self.proposer))
        self.constraint = compile_schema(spec.schema, pair.tokenizer)
        self.timing = timing
        if timing is None and spec.k_mode == "adaptive":
            self.timing = find_timing(conversation, store, self.drafter, self.prompt_ids, K_MAX + 1, spec.sampling)
        self.kept: list = []

    @property
    def needs_calibration(self) -> bool:
        return self.spec.k_mode == "adaptive" and self.timing is None

    def calibrate(self, progress: Progress = None) -> Timing | None:
        """The calibration adaptive k needs, made now if none was found (kept in the pair's store and the
        conversation); None for a fixed or heuristic k."""
        if self.spec.k_mode != "adaptive":
            return None
        if self.timing is None:
            self.timing, _ = calibrated_timing(self.pair, self.prompt_ids, self.proposer, self.store,
                                               SHORT_CALIBRATION.under(self.spec.sampling), progress)
        self.conversation.timings[(self.drafter, prompt_key(self.prompt_ids))] = self.timing
        return self.timing

    @property
    def curve(self) -> CostCurve | None:
        """The cost curve adaptive k chooses by (None before the calibration, or for another k)."""
        return CostCurve.from_timing(self.timing) if self.spec.k_mode == "adaptive" and self.timing else None

    def records(self) -> Iterator:
        """The loop's records as they come (each also kept in `kept`), after the calibration if one is owed."""
        spec = self.spec
        self.calibrate()
        controller = (spec.k if spec.k_mode == "fixed" else
                      make_controller(spec.k, self.curve, memory=self.conversation.controller(spec.drafter)))
        options = replace(HEADLESS if spec.headless else DEFAULT_OPTIONS, constraint=self.constraint)
        gen = speculative_generate(self.pair, self.prompt_ids, proposer=self.proposer, k=controller,
                                   sampling=spec.sampling, max_new_tokens=spec.max_new_tokens,
                                   min_confidence=spec.min_confidence, options=options)
        try:
            for rec in gen:
                self.kept.append(rec)
                yield rec
        finally:
            gen.close()

    def finish(self) -> Finished:
        """The text, output check and summary of the records so far."""
        tokens = [t for r in self.kept if isinstance(r, Iteration) for t in r.emitted]
        tokenizer = self.pair.tokenizer
        text = tokenizer.decode(tokens, skip_special_tokens=True) if tokenizer is not None else ""
        check = check_output(self.preset, text) if self.preset is not None else None
        if self.constraint is not None and (check is None or self.preset.output_schema != self.constraint.schema.value):
            check = check_output(schema_check(self.constraint), text)
        return Finished(text=text, check=check, summary=summarize(self.kept))

    def config(self) -> RunConfig:
        """What was asked for, as the run document records it."""
        spec = self.spec
        return RunConfig(prompt_ids=self.prompt_ids, drafter=self.drafter, k=spec.k, sampling=spec.sampling,
                         max_new_tokens=spec.max_new_tokens, prompt=spec.prompt, preset=spec.preset,
                         chat_template=spec.chat, min_confidence=spec.min_confidence, cost_curve=self.curve,
                         constraint=self.constraint.to_dict() if self.constraint is not None else None)

    def document(self, finished: Finished, plain_summary: RunSummary | None = None, **outcome) -> dict:
        """The run's JSON document (playground.document.run_document); `outcome`: RunOutcome's other fields."""
        return run_document(self.config(), RunOutcome(
            self.kept, outcome.pop("environment", None) or environment(self.pair), finished.text,
            summary=finished.summary, setup=outcome.pop("setup", None) or describe_setup(self.pair),
            check=finished.check, plain_summary=plain_summary, **outcome))


def prepare(pair, spec: RunSpec, conversation: Conversation | None = None, store: CalibrationStore | None = None,
            limits: Limits | None = None, proposer=None, timing: Timing | None = None) -> PreparedRun:
    """A run of `spec` on `pair`, checked and ready (see the module docstring). `conversation`: the memories and
    calibrations of earlier runs (a new one: none). `store`: the pair's calibrations, shared. `limits`: this
    playground's limits on what a person asks (None: only the target's context is checked, as for the lab's own
    prompts). `proposer` / `timing`: given by a caller that built them (the lab's arms) instead of the spec's."""
    limits_given = limits is not None
    limits = limits or Limits.from_env()
    run = PreparedRun(pair, spec, conversation if conversation is not None else Conversation(), store, proposer,
                      timing)
    if spec.max_new_tokens is None:
        asked = run.preset.max_new_tokens if run.preset is not None else DEFAULT_NEW_TOKENS
        run.spec = replace(run.spec, max_new_tokens=min(asked, limits.max_new_tokens))
    if limits_given:
        limits.check_max_new_tokens(run.spec.max_new_tokens)
        limits.check_prompt_tokens(len(run.prompt_ids))
    check_request(pair, run.prompt_ids, run.spec.max_new_tokens)
    return run


def compile_schema(schema, tokenizer):
    """The spec's schema compiled for `tokenizer` (None without one; a grammar already compiled stays as it is)."""
    if schema is None or hasattr(schema, "guide"):
        return schema
    from .constraints.grammar import Grammar  # imports llguidance: only a constrained run needs it

    return Grammar(schema, tokenizer)


def schema_check(constraint) -> Preset:
    """A stand-in preset that checks the output, one JSON value, against the constraint's schema."""
    return Preset(name="schema", title="schema", kind="json", description=constraint.name, max_new_tokens=1,
                  output_format="json", prompt="-", output_schema=constraint.schema.value)

"""vLLM's streamed chunks and its per-request metrics -> one record per engine step (pure: no HTTP, no torch).

What vLLM gives a streamed completion (with `return_token_ids`, `stream_options.include_usage` and a server
started with --enable-per-request-metrics --per-request-spec-decode-metrics detailed):
  - one chunk per RequestOutput, with the step's new token ids: normally one chunk per engine step, but the
    API server merges the outputs of several steps into one chunk when it falls behind the engine (a
    loaded front-end core, many concurrent streams); `ServedRequest.merged_chunks` counts those;
  - in the final usage chunk, `metrics.speculative_decoding`: the acceptance histogram and, per verify step
    in order, `per_step_accepted` / `per_step_drafted`. A step in which the drafter proposed nothing (n-gram
    found no match) is no verify step: it is absent from those arrays, and emits exactly one token.

A verify step that accepted a of its d drafts emits a + 1 tokens: the a drafts, then the target's own token
(a correction when a < d, the bonus when a == d), fewer only when the request ends inside it (max_tokens,
EOS). The first chunk is the prompt pass's token. Which 1-token steps were verify steps that rejected their
first draft and which had no draft is not in the stream; n-gram's are decided exactly by replaying vLLM's
proposer (playground.backends.vllm_ngram) and checking the replay against the arrays, a draft model drafts at
every step, one chunk per step settles most of the rest, and otherwise the order is assumed (`schedule` says
which).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields

from ..core.records import ACCEPTED, BONUS, CORRECTION, PLAIN

TARGET = "target"  # live only: the target's own token, whose role (correction, bonus or plain) the end tells
NOT_AVAILABLE = "not available from vLLM"


@dataclass(frozen=True)
class VllmSpecMetrics:
    """vLLM's `metrics.speculative_decoding` for one request, the fields the playground reads (None where vLLM
    did not send one). The dict as sent stays on the ServedRequest (`spec`): its record shows all of it."""

    num_spec_steps: int | None = None  # verify steps
    num_draft_tokens: int | None = None
    num_accepted_draft_tokens: int | None = None
    mean_acceptance_length: float | None = None
    draft_acceptance_rate: float | None = None
    acceptance_histogram: list[int] | None = None  # verify steps by accepted drafts (index = accepted)
    per_step_drafted: list[int] | None = None  # per verify step, in order
    per_step_accepted: list[int] | None = None

    @classmethod
    def parse(cls, sent: dict | None) -> VllmSpecMetrics | None:
        """The metrics as sent -> this; None for none (a plain server, or an empty object)."""
        if not sent:
            return None
        return cls(**{f.name: sent[f.name] for f in fields(cls) if f.name in sent})


@dataclass(frozen=True)
class Chunk:
    """One streamed chunk as received: its token ids, text, arrival (s since the request was sent)."""

    token_ids: tuple[int, ...]
    text: str
    arrived_s: float
    finish_reason: str | None = None


@dataclass(frozen=True)
class ServedStep:
    """One engine step of one request on a vLLM server.

    index 0 is the prompt pass (its token is the target's own: PLAIN). `roles` uses the playground's role
    names (accepted, correction, bonus, plain; TARGET in live records). `seconds` is the gap between this
    step's chunk and the one before (the prompt pass: time to first token), None when its chunk held several
    steps. vLLM does not expose the draft / verify split, the rejected draft tokens, p or q: those fields
    are always None."""

    index: int
    emitted: tuple[int, ...]
    roles: tuple[str, ...]
    text: str
    n_drafted: int | None  # drafts verified in this step (None: no draft, or not known yet)
    n_accepted: int | None
    chunk: int
    seconds: float | None
    elapsed_s: float
    finished: str | None = None
    provisional: bool = False  # a live record, from the chunk alone; the final ones replace it
    draft_s: None = None
    verify_s: None = None
    proposed: None = None
    p: None = None
    q: None = None

    @property
    def is_verify(self) -> bool:
        return bool(self.n_drafted)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ServedRequest:
    """One finished request: its final steps and what they and vLLM's metrics amount to."""

    model: str
    prompt_tokens: int
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str | None
    steps: tuple[ServedStep, ...]
    chunks: int
    merged_chunks: int  # chunks that held more than one engine step
    schedule: str  # how the 1-token steps were told apart: "exact: ..." or "assumed: ..."
    ttft_s: float
    wall_s: float  # request sent -> last chunk
    decode_s: float  # first chunk -> last chunk (prefill excluded, as the playground's tokens/s)
    tokens_per_s: float | None  # (tokens - 1) / decode_s: the decode rate
    spec: dict | None  # vLLM's metrics.speculative_decoding, as sent (spec_metrics: what the playground reads)
    server_metrics: dict  # vLLM's per-request timing metrics (time_to_first_token_ms, mean_itl_ms, ...)

    @property
    def spec_metrics(self) -> VllmSpecMetrics | None:
        return VllmSpecMetrics.parse(self.spec)

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def verify_steps(self) -> list[ServedStep]:
        return [s for s in self.steps if s.is_verify]

    @property
    def drafted(self) -> int:
        return sum(s.n_drafted for s in self.verify_steps)

    @property
    def accepted(self) -> int:
        return sum(s.n_accepted for s in self.verify_steps)

    @property
    def acceptance_histogram(self) -> dict[int, int]:
        """Verify steps by accepted drafts, from our steps (vLLM's own: spec_metrics.acceptance_histogram)."""
        return dict(sorted(Counter(s.n_accepted for s in self.verify_steps).items()))

    @property
    def alpha(self) -> float | None:
        """accepted / (accepted + rejections), as the playground's alpha (records.alpha_of)."""
        steps = self.verify_steps
        evaluated = sum(s.n_accepted + (s.n_accepted < s.n_drafted) for s in steps)
        return self.accepted / evaluated if evaluated else None

    @property
    def per_position_acceptance(self) -> tuple[float | None, ...]:
        """P(draft i accepted | drafts 1..i-1 accepted), i = 1..max drafted."""
        steps = self.verify_steps
        k = max((s.n_drafted for s in steps), default=0)
        reached, kept = [0] * k, [0] * k
        for s in steps:
            for i in range(min(s.n_drafted, s.n_accepted + 1)):
                reached[i] += 1
                kept[i] += i < s.n_accepted
        return tuple(kp / r if r else None for kp, r in zip(kept, reached))

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens per verify step (accepted + 1), vLLM's definition."""
        steps = self.verify_steps
        return 1 + self.accepted / len(steps) if steps else None

    def step_seconds(self, verify: bool) -> list[float]:
        """Gaps of the decode steps that arrived alone, verify steps or the others (prompt pass excluded)."""
        return [s.seconds for s in self.steps[1:] if s.seconds is not None and s.is_verify == verify]

    def summary(self) -> dict:
        return {"model": self.model, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "finish_reason": self.finish_reason, "steps": len(self.steps), "verify_steps": len(self.verify_steps),
                "chunks": self.chunks, "merged_chunks": self.merged_chunks, "schedule": self.schedule,
                "ttft_s": self.ttft_s, "decode_s": self.decode_s, "wall_s": self.wall_s,
                "tokens_per_s": self.tokens_per_s, "drafted": self.drafted, "accepted": self.accepted,
                "alpha": self.alpha, "mean_acceptance_length": self.mean_acceptance_length,
                "acceptance_histogram": {str(k): v for k, v in self.acceptance_histogram.items()},
                "per_position_acceptance": list(self.per_position_acceptance),
                "draft_s": NOT_AVAILABLE, "verify_s": NOT_AVAILABLE, "p_q": NOT_AVAILABLE,
                "vllm_spec": self.spec, "vllm_timing": self.server_metrics}

    def to_dict(self) -> dict:
        return {**self.summary(), "token_ids": list(self.token_ids), "text": self.text,
                "step_records": [s.to_dict() for s in self.steps]}


def live_step(chunk: Chunk, index: int, previous_s: float) -> ServedStep:
    """The record shown while the request streams: a chunk of n tokens, read as one step, is n - 1 accepted
    drafts and the target's own token (the first chunk: the prompt pass)."""
    n = len(chunk.token_ids)
    if index == 0:
        roles = (PLAIN,) * n
    else:
        roles = (ACCEPTED,) * (n - 1) + (TARGET,) * min(n, 1)
    return ServedStep(index=index, emitted=chunk.token_ids, roles=roles, text=chunk.text, n_drafted=None,
                      n_accepted=(n - 1) if index and n else None, chunk=index,
                      seconds=chunk.arrived_s - previous_s, elapsed_s=chunk.arrived_s,
                      finished=chunk.finish_reason, provisional=True)


def schedule_of(chunks: Sequence[Chunk], spec: VllmSpecMetrics | None, drafted_at: Sequence[bool] | None = None,
                every_step_drafts: bool = False) -> tuple[list[tuple[int, int] | None], str]:
    """The decode steps in order: (drafted, accepted) for a verify step, None for a step without a draft;
    and how that order was found. The prompt pass is not in the list.

    `drafted_at`: which decode steps drafted, from a replay of vLLM's proposer already checked against the
    per-step arrays (vllm_ngram.check_replay). `every_step_drafts`: the method drafts at every step (a draft
    model, EAGLE, MTP). Token counts alone cannot say it: the last step is cut short when the request ends
    inside it (an end-of-sequence token among the accepted drafts, max_tokens), by as many tokens as there may
    be steps without a draft."""
    n_tokens = sum(len(c.token_ids) for c in chunks)
    entries = list(zip(spec.per_step_drafted or [], spec.per_step_accepted or [])) if spec else []
    if not entries:
        return [None] * max(0, n_tokens - 1), "exact: no verify steps"
    if drafted_at is not None and sum(drafted_at) == len(entries):
        it = iter(entries)
        return [next(it) if d else None for d in drafted_at], "exact: vLLM's n-gram proposer replayed"
    if every_step_drafts:
        return entries, "exact: the method drafts at every step"
    n_plain = len(chunks) - 1 - len(entries)  # if every chunk is one step
    if n_plain >= 0:  # multi-token chunks are verify steps; a 1-token chunk is either kind
        order: list[tuple[int, int] | None] = []
        j, plain_left, guessed, fits = 0, n_plain, False, True
        for i, c in enumerate(chunks[1:], start=2):
            n = len(c.token_ids)
            if j < len(entries) and (n > 1 or entries[j][1] == 0 or plain_left == 0):
                guessed |= n == 1 and plain_left > 0  # a rejected first draft, or no draft: both look like this
                fits &= n == entries[j][1] + 1 or (i == len(chunks) and n < entries[j][1] + 1)
                order.append(entries[j])
                j += 1
            else:
                fits &= n == 1
                order.append(None)
                plain_left -= 1
        if fits and j == len(entries) and plain_left == 0:
            return order, ("assumed: a 1-token step next to a rejected first draft counted as the rejection"
                           if guessed else "exact: one chunk per step")
    n_plain = max(0, n_tokens - 1 - sum(a + 1 for _, a in entries))
    return entries + [None] * n_plain, "assumed: verify steps first (chunks were merged)"


def reconstruct(chunks: Sequence[Chunk], spec: VllmSpecMetrics | None, drafted_at: Sequence[bool] | None = None,
                every_step_drafts: bool = False) -> tuple[list[ServedStep], str, int]:
    """The final steps, the schedule note, and how many chunks held more than one step."""
    order, how = schedule_of(chunks, spec, drafted_at, every_step_drafts)
    tokens = [t for c in chunks for t in c.token_ids]
    owner = [i for i, c in enumerate(chunks) for _ in c.token_ids]  # token position -> its chunk
    shapes: list[tuple[int, tuple[int, int] | None]] = [(1, None)]  # the prompt pass
    shapes += [(1 if e is None else e[1] + 1, e) for e in order]
    steps_in_chunk = Counter()
    spans = []
    pos = 0
    for size, entry in shapes:
        if pos >= len(tokens):
            break
        size = min(size, len(tokens) - pos)  # the last step may end early (max_tokens, EOS)
        spans.append((pos, size, entry))
        steps_in_chunk[owner[pos]] += 1
        pos += size
    steps = []
    last_of_chunk = {}
    for i, (start, _, _) in enumerate(spans):
        last_of_chunk[owner[start]] = i
    for i, (start, size, entry) in enumerate(spans):
        c = owner[start]
        end_chunk = owner[start + size - 1]
        emitted = tuple(tokens[start:start + size])
        if entry is None:
            roles = (PLAIN,) * size
            drafted = accepted = None
        else:
            drafted, accepted = entry
            tail = BONUS if accepted == drafted else CORRECTION
            roles = ((ACCEPTED,) * accepted + (tail,))[:size]
        alone = steps_in_chunk[c] == 1 and end_chunk == c
        previous = chunks[c - 1].arrived_s if c else 0.0
        text = "".join(chunks[j].text for j in range(c, end_chunk + 1)) if last_of_chunk.get(end_chunk) == i else ""
        steps.append(ServedStep(index=i, emitted=emitted, roles=roles, text=text, n_drafted=drafted,
                                n_accepted=accepted, chunk=c, seconds=chunks[c].arrived_s - previous if alone else None,
                                elapsed_s=chunks[end_chunk].arrived_s,
                                finished=chunks[-1].finish_reason if i == len(spans) - 1 else None))
    merged = sum(1 for n in steps_in_chunk.values() if n > 1)
    return steps, how, merged


def build_request(model: str, prompt_tokens: int, chunks: Sequence[Chunk], metrics: dict | None,
                  drafted_at: Sequence[bool] | None = None, every_step_drafts: bool = False) -> ServedRequest:
    spec = (metrics or {}).get("speculative_decoding")
    steps, how, merged = reconstruct(chunks, VllmSpecMetrics.parse(spec), drafted_at, every_step_drafts)
    timing = {k: v for k, v in (metrics or {}).items() if k != "speculative_decoding"}
    ttft = chunks[0].arrived_s if chunks else 0.0
    wall = chunks[-1].arrived_s if chunks else 0.0
    decode = wall - ttft
    n = sum(len(c.token_ids) for c in chunks)
    return ServedRequest(model=model, prompt_tokens=prompt_tokens,
                         token_ids=tuple(t for c in chunks for t in c.token_ids),
                         text="".join(c.text for c in chunks), finish_reason=chunks[-1].finish_reason if chunks else None,
                         steps=tuple(steps), chunks=len(chunks), merged_chunks=merged, schedule=how, ttft_s=ttft,
                         wall_s=wall, decode_s=decode, tokens_per_s=(n - 1) / decode if decode > 0 else None,
                         spec=spec, server_metrics=timing)

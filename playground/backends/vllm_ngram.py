"""vLLM's n-gram proposer, rewritten in plain Python, and a greedy replay of a finished request with it and with
the playground's own prompt lookup (playground.drafters.proposers.lookup): which drafts each would have made
on the same tokens, and how many of them the target's greedy output would have kept.

vLLM 0.32 (vllm/v1/spec_decode/ngram_proposer.py, `_find_longest_matched_ngram_and_propose_tokens`) searches
the context for the LONGEST n-gram (prompt_lookup_min <= n <= prompt_lookup_max) that equals the context's
last n tokens and, among the matches of that length, takes the EARLIEST; it proposes the k tokens after it
(fewer at the context's end), and nothing when no n-gram of at least prompt_lookup_min matches. Ours takes
the longest n as well but the MOST RECENT match, cuts the proposal after an end-of-sequence token, and the
loop drafts at most (tokens still wanted - 1). With greedy decoding the target's tokens do not depend on the
drafts, so replaying both rules over vLLM's own output is exact: `compare_lookup` says where they differ.

The replay of vLLM's rule is checked against vLLM's per-step arrays (`check_replay`): when it matches, it
also says which of the request's steps had no draft (steps absent from those arrays), which the stream
cannot tell from a step that rejected its first draft.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from ..results.vllm import LookupCrosscheck, NgramReplayCheck, NgramReplaySummary, OurLoopCheck, VllmReported
from .vllm_steps import VllmSpecMetrics

Propose = Callable[[Sequence[int], int], list[int]]


def vllm_ngram_propose(tokens: Sequence[int], k: int, min_n: int, max_n: int) -> list[int]:
    """What vLLM's n-gram proposer drafts after `tokens` (the whole context: prompt and output so far)."""
    total = len(tokens)
    if total < min_n or k <= 0:
        return []
    best_n, best_start = 0, -1
    # A match starts at s and ends before the last token (its continuation is never empty). Earliest start
    # first, so a later match replaces the kept one only when it is strictly longer.
    for s in range(total - 1):
        n = _match_length(tokens, s, total, max_n)
        if n > best_n:
            best_n, best_start = n, s
    if best_n < min_n:
        return []
    start = best_start + best_n
    return list(tokens[start:start + min(k, total - start)])


def _match_length(tokens: Sequence[int], s: int, total: int, max_n: int) -> int:
    """The longest n <= max_n with tokens[s:s+n] == tokens[total-n:] and s + n <= total - 1."""
    best = 0
    for n in range(1, min(max_n, total - 1 - s) + 1):
        if all(tokens[s + i] == tokens[total - n + i] for i in range(n)):
            best = n
    return best


def our_lookup_propose(max_n: int, min_n: int = 1, stop_ids: Sequence[int] = ()) -> Propose:
    """The playground's prompt lookup as the loop runs it (PromptLookupProposer: cut after a stop token)."""
    from ..drafters.proposers import lookup  # imports torch (the drafters package): only for the cross-check

    stop = set(stop_ids)

    def propose(tokens: Sequence[int], k: int) -> list[int]:
        found = lookup(tokens, k, max_n, min_n)
        for i, x in enumerate(found):
            if x in stop:
                return found[:i + 1]
        return found

    return propose


@dataclass(frozen=True)
class Replay:
    """A greedy replay of one drafting rule over a finished output."""

    steps: tuple[tuple[int, int] | None, ...]  # per decode step: (drafted, accepted) or None (no draft)
    proposals: tuple[tuple[int, ...], ...]  # per decode step: what was drafted (empty: nothing)

    @property
    def drafted_at(self) -> list[bool]:
        return [s is not None for s in self.steps]

    @property
    def verify(self) -> list[tuple[int, int]]:
        return [s for s in self.steps if s is not None]

    def summary(self) -> NgramReplaySummary:
        """decode_steps counts the steps after vLLM's prompt pass; ours also the first (it may draft)."""
        v = self.verify
        accepted = sum(a for _, a in v)
        drafted = sum(d for d, _ in v)
        evaluated = sum(a + (a < d) for d, a in v)
        return NgramReplaySummary(decode_steps=len(self.steps), verify_steps=len(v), drafted=drafted,
                                  accepted=accepted, alpha=accepted / evaluated if evaluated else None,
                                  draft_acceptance_rate=accepted / drafted if drafted else None,
                                  mean_acceptance_length=1 + accepted / len(v) if v else None,
                                  histogram={str(a): n for a, n in sorted(Counter(a for _, a in v).items())})


def replay_ngram(prompt: Sequence[int], output: Sequence[int], k: int, propose: Propose, ours: bool = False) -> Replay:
    """Walk the output as a speculative loop would with greedy acceptance: at each decode step draft from the
    context, keep the drafts that equal the output's next tokens, emit them and the target's own token.

    vLLM's prompt pass makes output[0] without drafts. `ours`: as the playground's loop runs instead, whose
    first iteration drafts from the prompt alone and which drafts at most (tokens left - 1). The last step's
    acceptance is a lower bound when the output was cut by max_tokens (the target's tokens past the cut are
    unknown); `check_replay` allows for it."""
    start = 0 if ours else 1
    tokens = list(prompt) + list(output[:start])
    pos, n = start, len(output)
    steps, proposals = [], []
    while pos < n:
        k_here = min(k, n - pos - 1) if ours else k
        drafts = propose(tokens, k_here) if k_here > 0 else []
        if not drafts:
            steps.append(None)
            proposals.append(())
            emit = 1
        else:
            a = 0
            while a < len(drafts) and pos + a < n and drafts[a] == output[pos + a]:
                a += 1
            steps.append((len(drafts), a))
            proposals.append(tuple(drafts))
            emit = min(a + 1, n - pos)
        tokens += output[pos:pos + emit]
        pos += emit
    return Replay(tuple(steps), tuple(proposals))


def replay_vllm(prompt: Sequence[int], output: Sequence[int], k: int, min_n: int, max_n: int) -> Replay:
    return replay_ngram(prompt, output, k, lambda t, kk: vllm_ngram_propose(t, kk, min_n, max_n))


def check_replay(rep: Replay, spec: VllmSpecMetrics | None) -> tuple[bool, str]:
    """Whether a replay of vLLM's rule reproduces the request's per-step arrays (the last step may have kept
    more than the replay can see past max_tokens)."""
    if not spec:
        return not rep.verify, "no speculative metrics in the response"
    got = rep.verify
    want = list(zip(spec.per_step_drafted or [], spec.per_step_accepted or []))
    if len(got) != len(want):
        return False, f"{len(got)} verify steps replayed, vLLM reported {len(want)}"
    for i, ((dg, ag), (dw, aw)) in enumerate(zip(got, want)):
        last = i == len(want) - 1
        if dg != dw or (ag != aw and not (last and ag <= aw)):
            return False, f"verify step {i + 1}: replay drafted/accepted {dg}/{ag}, vLLM {dw}/{aw}"
    return True, f"all {len(want)} verify steps reproduced"


def compare_lookup(prompt: Sequence[int], output: Sequence[int], k: int, min_n: int, max_n: int,
                   spec: VllmSpecMetrics | None, stop_ids: Sequence[int] = ()) -> LookupCrosscheck:
    """vLLM's n-gram (as vLLM reported it, and as replayed) against our lookup with the same n-gram range, on
    the same greedy output: drafts, acceptance, and the steps where the two rules proposed differently."""
    theirs = replay_vllm(prompt, output, k, min_n, max_n)
    ok, why = check_replay(theirs, spec)
    ours = replay_ngram(prompt, output, k, our_lookup_propose(max_n, min_n, stop_ids), ours=True)
    # Same contexts, both rules: how often they would have drafted differently.
    ours_rule = our_lookup_propose(max_n, min_n, stop_ids)
    contexts = differ = 0
    tokens = list(prompt) + list(output[:1])
    for x in output[1:]:
        contexts += 1
        differ += vllm_ngram_propose(tokens, k, min_n, max_n) != ours_rule(tokens, k)
        tokens.append(x)
    reported = None
    if spec:
        reported = VllmReported(verify_steps=spec.num_spec_steps, drafted=spec.num_draft_tokens,
                                accepted=spec.num_accepted_draft_tokens,
                                mean_acceptance_length=spec.mean_acceptance_length,
                                draft_acceptance_rate=spec.draft_acceptance_rate)
    return LookupCrosscheck(k=k, prompt_lookup_min=min_n, prompt_lookup_max=max_n, output_tokens=len(output),
                            vllm_reported=reported,
                            vllm_replayed=NgramReplayCheck(**asdict(theirs.summary()), reproduces_vllm=ok, check=why),
                            our_lookup=ours.summary(), contexts=contexts, contexts_proposing_differently=differ)


def run_our_loop(pair, prompt: Sequence[int], k: int, min_n: int, max_n: int, max_new_tokens: int,
                 vllm_output: Sequence[int]) -> OurLoopCheck:
    """Our own loop (playground.core.engine) with our lookup on the same prompt, greedy: its acceptance beside a
    vLLM request's, and whether its output is vLLM's `vllm_output` (it may differ at floating-point near-ties)."""
    from ..core.engine import HEADLESS, speculative_generate  # imports torch: only for this cross-check
    from ..core.records import Iteration, summarize  # as above
    from ..drafters.proposers import PromptLookupProposer  # as above

    records = list(speculative_generate(pair, list(prompt), proposer=PromptLookupProposer(max_n, min_n), k=k,
                                        max_new_tokens=max_new_tokens, options=HEADLESS))
    s = summarize(records)
    output = [t for r in records if isinstance(r, Iteration) for t in r.emitted]
    return OurLoopCheck(verify_steps=sum(1 for r in records if isinstance(r, Iteration) and r.proposed),
                        drafted=s.proposed, accepted=s.accepted, alpha=s.alpha,
                        histogram={str(a): n for a, n in s.accepted_length_histogram.items()},
                        same_output_as_vllm=output == list(vllm_output))

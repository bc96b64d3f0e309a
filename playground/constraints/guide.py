"""One run's constraint, kept in step with the tokens the loop commits (the engine's side of a grammar).

A `Guide` answers for any token list that extends the committed tokens (committed + drafted): which next tokens
the grammar allows there (`allowed`), how much of a proposal it allows (`legal`), what it forces (`forced`) and
whether it is complete (`done`). It moves one library matcher (`Matcher`, grammar.py) to the asked-for tokens by
rolling back to the common prefix and consuming the rest, and keeps each position's mask until the next `commit`,
so the masks drafting computed are the ones verification reads.

End-of-sequence tokens are the loop's, not the library's: a stop token is allowed exactly where the grammar is
complete (`accepting`), and never consumed (the run ends on it). Logits columns past the tokenizer's vocabulary
(a padded head) are never allowed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch


class Matcher(Protocol):
    """What a guide needs of a grammar library's matcher (grammar.Matcher wraps llguidance's)."""

    def bits(self) -> torch.Tensor: ...  # bool [tokenizer vocab]: the tokens it allows next (stop tokens aside)

    def consume(self, tokens: Sequence[int]) -> int: ...  # how many it took (it stops at the first refused)

    def rollback(self, n: int) -> None: ...

    def accepting(self) -> bool: ...

    def ff_tokens(self) -> list[int]: ...


class Guide:
    """A run's matcher, addressed by full token lists (prompt + output); see the module docstring."""

    def __init__(self, matcher: Matcher, prompt_len: int, width: int, stop_ids=(), schema_name: str = "the schema"):
        self.matcher, self.prompt_len, self.width = matcher, prompt_len, width
        self.stop_ids = tuple(sorted(int(t) for t in stop_ids if 0 <= int(t) < width))
        self.schema_name = schema_name
        self.consumed: list[int] = []  # the output tokens the matcher holds now (committed, and maybe drafted)
        self.committed: list[int] = []  # the output tokens committed so far (the matcher is in step with them)
        self._masks: dict[tuple[int, ...], tuple[torch.Tensor, bool]] = {}
        self._forced: dict[tuple[int, ...], list[int]] = {}

    def _goto(self, out: Sequence[int]) -> int:
        """Move the matcher to the output tokens `out`; returns how many of them it holds (fewer: one was refused)."""
        have = self.consumed
        common = 0
        for a, b in zip(have, out):
            if a != b:
                break
            common += 1
        if common < len(have):
            self.matcher.rollback(len(have) - common)
            del have[common:]
        rest = [int(t) for t in out[common:]]
        if rest:
            took = self.matcher.consume(rest)
            have.extend(rest[:took])
        return len(have)

    def _out(self, tokens: Sequence[int]) -> tuple[int, ...]:
        if len(tokens) < self.prompt_len + len(self.committed):
            raise ValueError("a guide is asked about tokens that do not extend what was committed")
        return tuple(int(t) for t in tokens[self.prompt_len:])

    def _state(self, tokens: Sequence[int]) -> tuple[torch.Tensor, bool]:
        """(bool [width]: the tokens allowed after `tokens`, whether the grammar is complete there), kept until the
        next commit."""
        out = self._out(tokens)
        state = self._masks.get(out)
        if state is None:
            if self._goto(out) < len(out):
                raise ValueError("a guide is asked about tokens its grammar refuses")
            bits, accepting = self.matcher.bits(), self.matcher.accepting()
            mask = torch.zeros(self.width, dtype=torch.bool)
            n = min(self.width, bits.shape[0])
            mask[:n] = bits[:n]
            if self.stop_ids:
                mask[list(self.stop_ids)] = accepting
            if not mask.any():  # past the grammar's end with no stop token: the loop ends the run before any is kept
                mask[:] = True
            state = self._masks[out] = (mask, accepting)
        return state

    def allowed(self, tokens: Sequence[int]) -> torch.Tensor:
        """Bool [width]: the tokens the grammar allows after `tokens` (prompt + output, extending the committed)."""
        return self._state(tokens)[0]

    def legal(self, tokens: Sequence[int], proposal: Sequence[int]) -> int:
        """How many of `proposal`, after `tokens`, the grammar allows in a row (a stop token ends it)."""
        for i, x in enumerate(proposal):
            if not self.allowed([*tokens, *proposal[:i]])[int(x)]:
                return i
            if int(x) in self.stop_ids:
                return i + 1
        return len(proposal)

    def forced(self, tokens: Sequence[int]) -> list[int]:
        """The tokens the grammar forces after `tokens` (the library's fast-forward tokens, cut so that no forced
        string ends mid-token), up to a stop token, which is never proposed."""
        out = self._out(tokens)
        found = self._forced.get(out)
        if found is None:
            if self._goto(out) < len(out):
                raise ValueError("a guide is asked about tokens its grammar refuses")
            found = []
            for t in self.matcher.ff_tokens():
                if t in self.stop_ids or t >= self.width:
                    break
                found.append(int(t))
            self._forced[out] = found
        return list(found)

    def done(self, tokens: Sequence[int]) -> bool:
        """The grammar is complete after `tokens` and allows nothing more but a stop token: the run ends here."""
        mask, accepting = self._state(tokens)
        if not accepting:
            return False
        rest = mask.clone()
        rest[list(self.stop_ids)] = False
        return not bool(rest.any()) or bool(rest.all())  # all: the no-stop-token case above

    def rows(self, tokens: Sequence[int], proposal: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        """Constrained verification: the k + 1 rows of `logits`, row i masked by what the grammar allows after the
        proposal's first i tokens (the loop cut the proposal at its first refused token: every row's state exists)."""
        stop = next((i + 1 for i, x in enumerate(proposal) if int(x) in self.stop_ids), len(proposal) + 1)
        every = torch.ones(self.width, dtype=torch.bool)  # past a proposed stop token: never read (the run ends)
        allowed = torch.stack([self.allowed([*tokens, *proposal[:i]]) if i < stop else every
                               for i in range(len(proposal) + 1)])
        return restrict(logits, allowed)

    def complete_at(self, tokens: Sequence[int], emitted: Sequence[int]) -> int | None:
        """The length of the shortest prefix of `emitted` (after `tokens`) after which the grammar is done, if any."""
        for j, x in enumerate(emitted):
            if int(x) in self.stop_ids:
                return None
            if self.done([*tokens, *emitted[: j + 1]]):
                return j + 1
        return None

    def commit(self, tokens: Sequence[int]) -> None:
        """The loop committed `tokens` (prompt + output; a final stop token is not the grammar's): the matcher moves
        there, and the masks of positions drafted past it are dropped."""
        out = [int(t) for t in tokens[self.prompt_len:]]
        if out and out[-1] in self.stop_ids:
            out.pop()
        if self._goto(out) < len(out):
            raise ValueError(f"{self.schema_name} refuses a committed token: the loop emitted a token it did not allow")
        self.committed = out
        self._masks = {key: m for key, m in self._masks.items() if list(key) == out}
        self._forced = {key: f for key, f in self._forced.items() if list(key) == out}


def restrict(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """`logits` ([V] or [n, V]) with every column `allowed` ([V'] or [n, V'] bool) refuses at -inf; columns past V'
    (a head wider than the tokenizer) are refused too. A new tensor: the caller's logits stay as they were."""
    width = logits.shape[-1]
    if allowed.shape[-1] < width:
        pad = torch.zeros((*allowed.shape[:-1], width - allowed.shape[-1]), dtype=torch.bool)
        allowed = torch.cat([allowed, pad], dim=-1)
    elif allowed.shape[-1] > width:
        allowed = allowed[..., :width]
    return logits.masked_fill(~allowed.to(logits.device), float("-inf"))

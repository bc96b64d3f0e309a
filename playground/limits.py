"""The limits a public playground needs, in one place: how long a prompt, how many new tokens, how big a
sweep, how many waiting events, how much a replay reads. Configuration, not code: each `Limits` field has the
environment variable `ENV_VARS` names (docs/hardening.md and docs/replay.md table them), read when a front end
asks (`Limits.from_env()` when the app is built or a command starts), never at import.

The browser app / API and `python -m playground generate` apply them; the lab commands are the operator's
own experiments and are not limited, except `replay`, which reads files of any size and applies the three replay
limits. Each value must be a whole number >= 1: a bad value is an error naming the variable, so a misconfigured
app refuses to start instead of running unlimited.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields

from .errors import PlaygroundError

ENV_VARS = {
    "max_prompt_chars": "PLAYGROUND_MAX_PROMPT_CHARS",
    "max_prompt_tokens": "PLAYGROUND_MAX_PROMPT_TOKENS",
    "max_new_tokens": "PLAYGROUND_MAX_NEW_TOKENS",
    "max_sweep_runs": "PLAYGROUND_MAX_SWEEP_RUNS",
    "queue_size": "PLAYGROUND_QUEUE_SIZE",
    "max_replay_turns": "PLAYGROUND_MAX_REPLAY_TURNS",
    "max_replay_tokens": "PLAYGROUND_MAX_REPLAY_TOKENS",
    "replay_chunk_tokens": "PLAYGROUND_REPLAY_CHUNK_TOKENS",
}


@dataclass(frozen=True)
class Limits:
    max_prompt_chars: int = 100_000
    max_prompt_tokens: int = 4096
    max_new_tokens: int = 2048
    max_sweep_runs: int = 85  # the UI's largest sweep: k = 1..16 plus plain, 5 rounds
    queue_size: int = 16
    max_replay_turns: int = 2000
    max_replay_tokens: int = 8192  # SmolLM2's context
    replay_chunk_tokens: int = 256  # its logits, chunk x vocabulary floats, are all a replay holds at once

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise PlaygroundError(f"the limit {f.name} ({ENV_VARS[f.name]}) must be a whole number >= 1, got {v!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Limits:
        """The limits from the environment (unset or empty: the default)."""
        env = os.environ if env is None else env
        values = {}
        for name, var in ENV_VARS.items():
            raw = env.get(var)
            if raw is None or not raw.strip():
                continue
            text = raw.strip()
            if not (text.isascii() and text.isdigit()) or int(text) < 1:
                raise PlaygroundError(f"{var} must be a whole number >= 1, got {raw!r}")
            values[name] = int(text)
        return cls(**values)

    def to_dict(self) -> dict:
        return asdict(self)

    # --- checks, with the message a person sees ---------------------------------------------------------

    def check_max_new_tokens(self, n) -> int:
        if isinstance(n, bool) or not isinstance(n, int):
            raise PlaygroundError(f"max new tokens must be a whole number, got {n!r}")
        if not 1 <= n <= self.max_new_tokens:
            raise PlaygroundError(f"max new tokens must be from 1 to {self.max_new_tokens}, got {n} (the upper "
                                  f"limit is this playground's setting {ENV_VARS['max_new_tokens']})")
        return n

    def check_prompt_chars(self, n_chars: int) -> None:
        if n_chars > self.max_prompt_chars:
            raise PlaygroundError(f"the prompt is {n_chars} characters; this playground takes at most "
                                  f"{self.max_prompt_chars} ({ENV_VARS['max_prompt_chars']}): shorten it")

    def check_prompt_tokens(self, n_tokens: int) -> None:
        if n_tokens > self.max_prompt_tokens:
            raise PlaygroundError(f"the prompt is {n_tokens} tokens; this playground takes at most "
                                  f"{self.max_prompt_tokens} ({ENV_VARS['max_prompt_tokens']}): shorten it")

    def check_sweep(self, k_max: int, rounds: int) -> None:
        runs = rounds * (k_max + 1)
        if runs > self.max_sweep_runs:
            raise PlaygroundError(f"a sweep of k = 1..{k_max} over {rounds} round(s) counts {runs} (rounds x (largest "
                                  f"k + 1)); this playground allows at most {self.max_sweep_runs} "
                                  f"({ENV_VARS['max_sweep_runs']}): lower the largest k or the rounds")

    def check_replay_tokens(self, n_prompt: int, n_completion: int) -> None:
        if n_prompt + n_completion > self.max_replay_tokens:
            raise PlaygroundError(f"the turn is {n_prompt} prompt + {n_completion} completion tokens; a replay takes at "
                                  f"most {self.max_replay_tokens} per turn ({ENV_VARS['max_replay_tokens']})")

    @property
    def max_trace_line_bytes(self) -> int:
        """The longest line a trace file may have: 64 bytes per token a turn may hold (a line that long cannot
        fit the token limit with any tokenizer that makes a token of fewer than 64 bytes)."""
        return 64 * self.max_replay_tokens

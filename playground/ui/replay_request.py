"""The Replay tab's request: the controls' raw values -> a `ReplayRequest` (`parse_replay`), or a PlaygroundError
that says what to fix. No gradio here.

An uploaded file is refused over `upload_limit` bytes: a turn holds at most PLAYGROUND_MAX_REPLAY_TOKENS tokens
and a replay reads at most PLAYGROUND_MAX_REPLAY_TURNS turns, and a chat line's text is its last turn's prompt
and completion, so a file of more than BYTES_PER_TOKEN bytes per token of that cannot be replayed whole. (The
trace reader still applies its own limits to each line and turn: playground.inputs.traces.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..core.engine import K_MAX, check_k
from ..core.sampling import SamplingConfig
from ..errors import PlaygroundError
from ..inputs.presets import get_preset
from ..lab.replay import check_confidence
from ..limits import ENV_VARS, Limits
from .form import Controls
from .session import _integer, parse_request

SOURCES = {"sample": "the sample trace", "file": "an uploaded trace file", "presets": "presets"}
CONTROLLERS = ("adaptive", "heuristic")
CALIBRATIONS = ("once", "bucket")
BYTES_PER_TOKEN = 8


@dataclass(frozen=True)
class ReplayRequest:
    source: str  # a key of SOURCES
    path: str | None  # the uploaded file (source "file")
    presets: tuple[str, ...]  # source "presets"
    drafter: str
    ks: tuple[int, ...]
    controllers: tuple[str, ...]
    calibration: str  # "once" (on the turn of median prompt length) or "bucket" (one per context-length bucket)
    sampling: SamplingConfig
    min_confidence: float | None = None  # the Run tab's draft confidence stop, replayed (greedy only)
    first_turns: int | None = None  # replay only a trace's first turns (None: all, up to the cap)


def parse_ks(text) -> tuple[int, ...]:
    """'1-8', '1,2,4,8' or '1-4, 8' -> sorted distinct k values, each from 1 to K_MAX."""
    example = f"a list like 1,2,4,8 or a range like 1-8 (k from 1 to {K_MAX})"
    if not isinstance(text, str) or not text.strip():
        raise PlaygroundError(f"k values are empty: type {example}")
    out: set[int] = set()
    for part in (p.strip() for p in text.replace(";", ",").split(",")):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            raise PlaygroundError(f"k values: {part[:40]!r} is not a whole number or a range; type {example}") from None
        if a > b:
            raise PlaygroundError(f"k values: the range {part!r} runs backwards; type {example}")
        out.update(check_k(k) for k in (a, b))
        out.update(range(a, b + 1))
    return tuple(sorted(out))


def upload_limit(limits: Limits) -> int:
    return BYTES_PER_TOKEN * limits.max_replay_tokens * limits.max_replay_turns


def size_text(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB" if n >= 1000 else f"{n} bytes"


def check_upload(path, limits: Limits) -> str:
    if not path or not isinstance(path, str):
        raise PlaygroundError("no trace file: upload a JSONL file (or choose the sample trace or presets)")
    p = Path(path)
    if not p.is_file():
        raise PlaygroundError("the uploaded trace file is gone from the server: upload it again")
    size, cap = p.stat().st_size, upload_limit(limits)
    if size > cap:
        raise PlaygroundError(
            f"the trace file is {size_text(size)}; this playground replays files of at most {size_text(cap)} "
            f"({BYTES_PER_TOKEN} bytes per token x {limits.max_replay_tokens} tokens per turn "
            f"({ENV_VARS['max_replay_tokens']}) x {limits.max_replay_turns} turns ({ENV_VARS['max_replay_turns']})): "
            f"upload a part of it, or replay it with `python -m playground replay FILE`")
    if size == 0:
        raise PlaygroundError("the trace file is empty: one JSON object per line (see the tab's note on the format)")
    return str(p)


def parse_replay(values: Mapping, drafters, limits: Limits) -> ReplayRequest:
    """The tab's controls (source, trace_file, presets, drafter, ks, controllers, calibration, and the Run tab's
    decoding, temperature, top_k, top_p, seed and min_confidence) -> a ReplayRequest."""
    values = Controls.of(values)
    source = values.source
    if source not in SOURCES:
        raise PlaygroundError(f"replay what? choose one of {', '.join(SOURCES)}, got {source!r}")
    drafter = values.drafter
    if drafter not in drafters:
        raise PlaygroundError(f"unknown drafter {drafter!r} for a replay on this pair; choose one of "
                              f"{', '.join(drafters)}")
    path = check_upload(values.trace_file, limits) if source == "file" else None
    presets: tuple[str, ...] = ()
    if source == "presets":
        names = values.presets or []
        names = [names] if isinstance(names, str) else list(names)
        if not names:
            raise PlaygroundError("no preset chosen: pick one or more presets to replay")
        if len(names) > limits.max_replay_turns:
            raise PlaygroundError(f"{len(names)} presets; a replay takes at most {limits.max_replay_turns} turns "
                                  f"({ENV_VARS['max_replay_turns']})")
        presets = tuple(get_preset(n).name for n in names)  # an unknown name: the presets' own message
    controllers = values.controllers or []
    bad = [c for c in controllers if c not in CONTROLLERS]
    if bad:
        raise PlaygroundError(f"unknown controller {bad[0]!r}; choose from {', '.join(CONTROLLERS)}")
    calibration = values.calibration or "once"
    if calibration not in CALIBRATIONS:
        raise PlaygroundError(f"calibration must be 'once' or 'bucket', got {calibration!r}")
    # the decoding settings through the Run tab's parser, the one place they are read (prompt and k: fillers)
    run = parse_request(values.but(prompt="replay", preset="", chat=False, drafter=drafter, k=1, max_new_tokens=1),
                        [drafter], limits)
    check_confidence(run.min_confidence, run.sampling, "auto")  # greedy only: said before the pair loads
    return ReplayRequest(source, path, presets, drafter, parse_ks(values.ks),
                         tuple(c for c in CONTROLLERS if c in controllers), calibration, run.sampling,
                         run.min_confidence, _first_turns(values.first_turns, limits))


def _first_turns(value, limits: Limits) -> int | None:
    """'First turns' as typed: empty or 0 is every turn (up to the cap)."""
    if value is None or value == "" or value == 0:
        return None
    n = _integer(value, "first turns")
    if not 1 <= n <= limits.max_replay_turns:
        raise PlaygroundError(f"first turns must be from 0 (all) to {limits.max_replay_turns}, got {n}")
    return n

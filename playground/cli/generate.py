"""`generate`: speculative decoding of one prompt or preset, its tokens printed as they arrive (coloured
by role: accepted, correction, bonus), then a summary; or, with --json, one JSON document of the run."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..constraints.schema import schema_from
from ..core.engine import plain_generate
from ..core.records import Iteration, RunSummary, describe_choices, prefill_note, summarize
from ..drafters.adaptive import parse_k
from ..envinfo import describe_setup, redact
from ..inputs.presets import get_preset
from ..inputs.text import check_prompt_text, read_prompt_file, token_pieces
from ..limits import Limits
from ..run import Finished, PreparedRun, RunSpec, prepare
from .load import pair_from_args, sampling_of

COLOURS = {"accepted": "\033[32m", "correction": "\033[1;31m", "bonus": "\033[1;36m", "plain": "",
           "forced": "\033[35m"}
RESET = "\033[0m"


def cmd_generate(args: argparse.Namespace) -> int:
    """Check every argument before the pair loads (seconds), so a bad one fails at once; then run through
    playground.run and print: the tokens as they come, then the summary (or, with --json, the run document)."""
    spec, limits = _spec(args)
    pair = pair_from_args(args, quiet=args.json)
    run = prepare(pair, spec, limits=limits)  # the prompt within the limits and the target's context, first
    colour = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    out = sys.stdout
    if not args.json:
        _header(run, args.k, colour)
    streamer = _Streamer(pair.tokenizer, colour, out) if not args.json else None
    for rec in run.records():
        if streamer is not None and isinstance(rec, Iteration):
            streamer.add(rec)
    finished = run.finish()
    plain_summary = None
    if args.compare_plain:
        plain_summary = summarize(plain_generate(pair, run.prompt_ids, sampling=spec.sampling,
                                                 max_new_tokens=run.spec.max_new_tokens, constraint=run.constraint))
    if args.json:
        json.dump(run.document(finished, plain_summary), out, indent=1)
        out.write("\n")
        return 0
    out.write("\n\n")
    _print_summary(finished, plain_summary, describe_setup(pair))
    return 0


def _spec(args: argparse.Namespace) -> tuple[RunSpec, Limits]:
    """The run `generate`'s arguments ask for, each checked (the schema too) before anything loads."""
    k = parse_k(args.k)
    sampling = sampling_of(args)
    limits = Limits.from_env()
    if args.max_new_tokens is not None:
        limits.check_max_new_tokens(args.max_new_tokens)
    prompt = args.prompt
    if args.prompt_file is not None:
        prompt = read_prompt_file(args.prompt_file, limits.max_prompt_chars)
    if prompt is not None:
        check_prompt_text(prompt, limits.max_prompt_chars)
    if args.preset is not None:
        get_preset(args.preset)
    schema = schema_from(args.schema) if getattr(args, "schema", None) is not None else None
    return RunSpec(drafter=args.drafter, k=k, sampling=sampling, max_new_tokens=args.max_new_tokens, prompt=prompt,
                   preset=args.preset, chat=None if args.preset is not None else not args.raw,
                   min_confidence=args.min_confidence, schema=schema,
                   drafter_options={"max_ngram": args.max_ngram}), limits


def _print_summary(finished: Finished, plain_summary: RunSummary | None, setup: str) -> None:
    """The summary, the output check and the measured speed-up against plain decoding, as text."""
    summary, check = finished.summary, finished.check
    print(format_summary(summary, setup))
    if check is not None:
        verdict = "valid against the schema" if check.schema_valid else (
            "valid JSON" if check.is_json and check.schema_valid is None else "NOT valid")
        print(f"output check: {verdict}" + (f" ({check.error})" if check.error else ""))
    if plain_summary is not None:
        ratio = summary.tokens_per_s / plain_summary.tokens_per_s if plain_summary.tokens_per_s else float("nan")
        print(f"plain decoding, run right after: {plain_summary.tokens_per_s:.1f} tokens/s -> measured speed-up "
              f"{ratio:.2f}x (one adjacent pair of runs, prefill excluded: a noisy figure on a shared machine)")


def _header(run: PreparedRun, k: str, colour: bool) -> None:
    """The lines before a run's text (on stderr): the pair, drafter and settings, the schema, the colours' key."""
    print(f"# {redact(run.pair.target_name)} | drafter: {run.drafter} | k={k} | {run.spec.sampling.describe()} | "
          f"{describe_setup(run.pair)}", file=sys.stderr)
    if run.constraint is not None:
        print(f"# constrained to {run.constraint.describe()}", file=sys.stderr)
    if colour:
        print(f"# {_paint('accepted', 'accepted')}  {_paint('forced', 'forced')}  "
              f"{_paint('correction', 'correction')}  {_paint('bonus', 'bonus')}  plain", file=sys.stderr)


def _paint(text: str, role: str) -> str:
    c = COLOURS.get(role, "")
    return f"{c}{text}{RESET}" if c else text


class _Streamer:
    """Prints each iteration's tokens as they arrive, coloured by role. The text is re-split into pieces
    over all tokens so far (a character may span tokens); only the pieces not yet printed are written."""

    def __init__(self, tokenizer, colour: bool, out):
        self.tokenizer, self.colour, self.out = tokenizer, colour, out
        self.tokens: list[int] = []
        self.roles: list[str] = []
        self.printed = 0

    def add(self, it: Iteration) -> None:
        self.tokens.extend(it.emitted)
        self.roles.extend(it.roles)
        pieces = token_pieces(self.tokenizer, self.tokens, skip_special_tokens=True)
        for piece, role in zip(pieces[self.printed:], self.roles[self.printed:]):
            self.out.write(_paint(piece, role) if self.colour else piece)
        self.printed = len(pieces)
        self.out.flush()


def format_summary(s: RunSummary, setup: str) -> str:
    lines = [f"summary ({setup}; prefill excluded from tokens/s)"]
    lines.append(f"  new tokens {s.new_tokens} in {s.target_passes} target passes: {s.tokens_per_pass:.2f} tokens/pass, "
                 f"{s.tokens_per_s:.1f} tokens/s, decode {s.decode_s:.2f} s, prefill {s.prefill_s:.2f} s"
                 + (f" ({note})" if (note := prefill_note(s)) else ""))
    if s.alpha is not None:
        lines.append(f"  alpha {s.alpha:.3f} (accepted {s.accepted} of {s.proposed} proposed; alpha counts only "
                     f"proposals the rule evaluated)")
        hist = ", ".join(f"{n}:{c}" for n, c in s.accepted_length_histogram.items())
        lines.append(f"  accepted per iteration (length:count) {hist}")
        pos = " ".join("-" if a is None else f"{a:.2f}" for a in s.per_position_acceptance)
        lines.append(f"  acceptance by draft position {pos}")
    if len(s.k_values) > 1:  # an adaptive or heuristic k: how often each k was chosen (k = 0: a plain step)
        lines.append(f"  k chosen per iteration (k\u00d7iterations) {describe_choices(s.k_values, s.drafted_values)}")
    total = s.decode_s or 1.0
    lines.append(f"  time: drafting {s.draft_s:.3f} s ({100 * s.draft_s / total:.0f}%), verification {s.verify_s:.3f} s "
                 f"({100 * s.verify_s / total:.0f}%), rollback {s.rollback_s:.4f} s ({100 * s.rollback_s / total:.1f}%), "
                 f"other {s.overhead_s:.3f} s")
    roles = ", ".join(f"{k} {v}" for k, v in s.roles.items())
    forced = (f"; the schema forced {100 * s.forced_share:.0f}% of the tokens" if s.roles.get("forced") else "")
    lines.append(f"  tokens by role: {roles}{forced}; finished by {s.finished}")
    return "\n".join(lines)

"""Records -> token HTML: one coloured span per emitted token, one wrapper span per iteration.

Pure string building (no gradio, no torch): the UI appends what `TokenRenderer.add` returns as the
run streams, so the HTML is append-only and Gradio ships only the new part to the browser.

Each token span carries its role as a class (accepted draft token, the target's correction, the
bonus token, a plain step) and a hover text (its iteration, role, p(x), q(x) and the acceptance
probability min(1, p/q) where known). Iterations alternate two underline colours and are separated
by a thin bar, so iteration boundaries are visible in the text itself. The hover text is also what a tap on
a token shows under the box (javascript.TOKEN_DETAILS), for touch screens.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from ..core.records import ACCEPTED, BONUS, CORRECTION, FORCED, PLAIN, Iteration, Prefill, Step
from ..drafters.registry import source, sources

REPLACEMENT = "\ufffd"

ROLE_CLASS = {ACCEPTED: "acc", CORRECTION: "cor", BONUS: "bon", PLAIN: "pln", FORCED: "frc"}
ROLE_LABEL = {
    ACCEPTED: "accepted draft token",
    CORRECTION: "target's correction",
    BONUS: "bonus token",
    PLAIN: "plain step",
    FORCED: "forced by the schema",
}

ROLE_HELP = {
    ACCEPTED: "a proposal the target kept",
    CORRECTION: "the target's own token after it rejected a proposal",
    BONUS: "the target's extra token after it kept all k proposals",
    PLAIN: "one target pass, one token (nothing was proposed)",
    FORCED: "a token the schema forced, proposed at no model cost and kept by the target",
}


class PieceDecoder:
    """Incremental `playground.text.token_pieces`: one decode per new token, same pieces.

    A piece is the growth of the decoded prefix; a prefix ending in an incomplete character is held
    back (an empty piece) until a later token completes it. With no tokenizer (tiny test models) a
    token shows as its id."""

    def __init__(self, tokenizer, skip_special_tokens: bool = False):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        self.tokens: list[int] = []
        self.shown = ""

    def extend(self, tokens: Iterable[int]) -> list[str]:
        pieces = []
        for t in tokens:
            self.tokens.append(int(t))
            if self.tokenizer is None:
                pieces.append(f"\u27e8{int(t)}\u27e9")
                continue
            text = self.tokenizer.decode(self.tokens, skip_special_tokens=self.skip)
            if text.endswith(REPLACEMENT):
                pieces.append("")  # an incomplete character: its bytes land on a later token
                continue
            if text.startswith(self.shown):
                pieces.append(text[len(self.shown):])
            else:  # decoding re-spaced earlier text: show the tail from where they part
                common = 0
                while common < min(len(text), len(self.shown)) and text[common] == self.shown[common]:
                    common += 1
                pieces.append(text[common:])
            self.shown = text
        return pieces

    def token_text(self, token: int) -> str:
        """One token on its own (for a rejected proposal, which never joined the text)."""
        if self.tokenizer is None:
            return f"\u27e8{int(token)}\u27e9"
        return self.tokenizer.decode([int(token)], skip_special_tokens=False)


def escape_piece(piece: str) -> str:
    """Token text -> HTML: escaped, newlines shown as a faint return mark before the line break."""
    out = html.escape(piece, quote=True)
    return out.replace("\n", '<span class="nl">\u21b5</span>\n')


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x != 0 and abs(x) < 1e-3:
        return f"{x:.1e}"
    return f"{x:.3f}"


def _quoted(text: str) -> str:
    return repr(text)[1:-1] if text else "(empty)"


def source_label(name: str) -> str:
    """Where a proposal tagged `name` came from (Iteration.sources; DrafterSpec.sources declares its words)."""
    declared = source(name)
    return declared.label if declared is not None else name


def copied(name: str) -> bool:
    """A proposal tagged `name` copied earlier text (no model ran): the token view outlines it."""
    declared = source(name)
    return declared is not None and declared.copies


def token_tip(it: Iteration, j: int, greedy: bool, rejected_text: str | None = None,
              token_text: str | None = None) -> str:
    """Hover text for the j-th emitted token of an iteration (plain text; escaped by the caller)."""
    role = it.roles[j]
    lines = [f"iteration {it.index + 1} \u00b7 {ROLE_LABEL[role]} ({ROLE_HELP[role]})"]
    token = it.emitted[j]
    lines.append(f"token {token}" + (f"  '{_quoted(token_text)}'" if token_text is not None else ""))
    accept = it.accept_prob
    if role in (ACCEPTED, FORCED):
        lines.append(f"draft position {j + 1} of {len(it.proposed)} proposed (k={it.k})"
                     + (f", {source_label(it.sources[j])}" if it.sources else ""))
        if it.p is not None:
            lines.append(_prob_line(it, j, accept, greedy))
    elif role == CORRECTION:
        i = it.n_accepted
        shown = f" '{_quoted(rejected_text)}'" if rejected_text is not None else ""
        lines.append(f"replaces the rejected proposal at position {i + 1} of {len(it.proposed)}: "
                     f"token {it.proposed[i]}{shown}"
                     + (f" ({source_label(it.sources[i])})" if it.sources else ""))
        if it.p is not None and i < len(it.p):
            lines.append("rejected proposal: " + _prob_line(it, i, accept, greedy))
    elif role == BONUS:
        lines.append(f"all {len(it.proposed)} proposals kept: the verification pass gave this token for free")
    elif role == PLAIN:
        lines.append("the drafter proposed nothing this iteration" if it.k else "k was 0 this iteration")
    if greedy and it.p is not None and role in (ACCEPTED, FORCED, CORRECTION):
        lines.append("greedy: a proposal is kept iff it is the target's arg-max; p, q shown at temperature 1")
    return "\n".join(lines)


def _prob_line(it: Iteration, i: int, accept, greedy: bool) -> str:
    p = it.p[i]
    q = "1 (deterministic proposal)" if it.q is None else _fmt(it.q[i])
    a = _fmt(accept[i]) if accept is not None else "n/a"
    return f"p(x) = {_fmt(p)}  q(x) = {q}  min(1, p/q) = {a}"


def _span(piece: str, cls: str, tip: str, token: int) -> str:
    extra = " empty" if piece == "" else ""
    return (f'<span class="tok {cls}{extra}" data-token="{token}" title="{html.escape(tip, quote=True)}">'
            f"{escape_piece(piece)}</span>")


class TokenRenderer:
    """Turns a run's records into token HTML, one record at a time (append-only output)."""

    def __init__(self, tokenizer, greedy: bool = True, special_ids: Iterable[int] = ()):
        self.decoder = PieceDecoder(tokenizer)
        self.greedy = greedy
        self.special = frozenset(int(t) for t in special_ids)
        self.parts: list[str] = []
        self.n_iterations = 0

    def add(self, record) -> str:
        """HTML for one record ('' for a Prefill); also kept, so `html()` is the whole run."""
        if isinstance(record, Iteration):
            out = self._iteration(record)
        elif isinstance(record, Step):
            out = self._step(record)
        elif isinstance(record, Prefill):
            return ""
        else:
            raise TypeError(f"not a record: {record!r}")
        self.parts.append(out)
        return out

    def html(self) -> str:
        return "".join(self.parts)

    def _cls(self, role: str, token: int) -> str:
        return ROLE_CLASS[role] + (" special" if token in self.special else "")

    def _iteration(self, it: Iteration) -> str:
        pieces = self.decoder.extend(it.emitted)
        rejected = None
        if CORRECTION in it.roles and it.n_accepted < len(it.proposed):
            rejected = self.decoder.token_text(it.proposed[it.n_accepted])
        spans = []
        for j, (token, piece) in enumerate(zip(it.emitted, pieces)):
            tip = token_tip(it, j, self.greedy, rejected if it.roles[j] == CORRECTION else None, piece)
            cls = self._cls(it.roles[j], token)
            if it.roles[j] == ACCEPTED and it.sources and copied(it.sources[j]):
                cls += " lk"
            spans.append(_span(piece, cls, tip, token))
        parity = "odd" if self.n_iterations % 2 else "even"
        self.n_iterations += 1
        end = _finish_mark(it.finished)
        return f'<span class="it {parity}" data-iteration="{it.index + 1}">{"".join(spans)}</span>{end}'

    def _step(self, step: Step) -> str:
        (piece,) = self.decoder.extend([step.token])
        tip = f"step {step.index + 1} \u00b7 plain decoding ({ROLE_HELP[PLAIN]})\ntoken {step.token}"
        parity = "odd" if self.n_iterations % 2 else "even"
        self.n_iterations += 1
        return (f'<span class="it {parity}" data-iteration="{step.index + 1}">'
                f'{_span(piece, self._cls(PLAIN, step.token), tip, step.token)}</span>{_finish_mark(step.finished)}')


def _finish_mark(finished: str | None) -> str:
    if finished is None:
        return ""
    what = {"eos": "end of sequence", "length": "max new tokens reached",
            "schema": "the schema's value is complete"}.get(finished, finished)
    return f'<span class="fin" title="the run stopped here">\u25a0 {html.escape(what)}</span>'


def records_html(records: Sequence, tokenizer=None, greedy: bool = True, special_ids: Iterable[int] = ()) -> str:
    """The whole run's token HTML at once (what the streamed pieces add up to)."""
    r = TokenRenderer(tokenizer, greedy, special_ids)
    for rec in records:
        r.add(rec)
    return r.html()


def legend_html() -> str:
    """The colour key (each chip's hover text says what the role means)."""
    chips = "".join(
        f'<span class="tok {ROLE_CLASS[role]}" title="{html.escape(ROLE_HELP[role], quote=True)}">'
        f"{html.escape(ROLE_LABEL[role])}</span>"
        for role in (ACCEPTED, FORCED, CORRECTION, BONUS, PLAIN)
    )
    copy_label = next(s.label for s in sources() if s.copies)  # the legend's copied chip: the first copying source
    chips += (f'<span class="tok acc lk" title="{html.escape(copy_label, quote=True)} '
              '(hybrid drafter; the suffix drafters\' copies alike)">copied by lookup</span>')
    return (f'<div class="legend">{chips}<span class="legend-note"><span class="it even">iter</span>'
            f'<span class="it odd">ations</span> alternate underlines \u00b7 hover a token for p(x), q(x), '
            f"min(1, p/q)</span></div>")


EMPTY_TOKENS = '<span class="placeholder">Generated tokens appear here, coloured by role, as the run streams.</span>'

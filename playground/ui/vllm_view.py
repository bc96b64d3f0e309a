"""The "vLLM server" tab's content, without gradio: the operator's settings, the server's header, the token view
of the engine steps, the counters, the acceptance histogram, vLLM's metrics and the concurrency table.

The tab exists only where the operator sets PLAYGROUND_VLLM_URL (read once, when the app is built): users never
type a URL. Without PLAYGROUND_VLLM_SPEC (docs/vllm.md), which vLLM does not serve back, the header shows what the
server's /metrics say (whether it speculates, and k from its per-position counters) and the method is unknown.

The token view reuses render.py's classes (`tok acc|cor|bon|pln`, `it even|odd`, theme.py draws them). vLLM
streams a step's text, not each token's, so a step is drawn as its runs of one role (the accepted drafts, then
the target's own token); where a step mixes roles, the tail's text comes from the server's /detokenize (`detok`),
cached per request. A step whose text does not split that way is drawn as one span, its roles in the hover text.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..backends import ServedRequest, ServedStep, SpecConfig, VllmClient, parse_spec_config
from ..backends.vllm_steps import NOT_AVAILABLE, TARGET
from ..core.records import ACCEPTED, BONUS, CORRECTION, PLAIN
from ..envinfo import redact
from ..results.vllm import ServedArmFigures
from . import charts
from .markup import cards_html
from .render import ROLE_CLASS, ROLE_HELP, ROLE_LABEL, escape_piece

ENV_URL = "PLAYGROUND_VLLM_URL"
ENV_SPEC = "PLAYGROUND_VLLM_SPEC"
ENV_MODEL = "PLAYGROUND_VLLM_MODEL"
CONCURRENCIES = (1, 2, 4)
SWEEP_COLUMNS = ["concurrency", "requests", "aggregate tokens/s", "tokens/s per request (median)",
                 "mean acceptance length", "batch wall (s)", "merged chunks"]
LIVE_CLASS = {**ROLE_CLASS, TARGET: "pln"}  # live: the target's own token, grey until the end says which
LIVE_LABEL = {**ROLE_LABEL, TARGET: "the target's own token (correction or bonus: known when the request ends)"}
EMPTY_TOKENS = '<span class="placeholder">The server\'s tokens appear here, coloured by role, per engine step.</span>'
HIST_TITLE = "Acceptance histogram: verify steps by accepted drafts"


@dataclass(frozen=True)
class VllmSettings:
    """The operator's vLLM server: its URL and, when told, the speculative config it was started with."""

    url: str
    spec: SpecConfig | None = None
    model: str | None = None  # the model the server must serve (else a clear error); None: whatever it serves
    timeout: float = 120.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> VllmSettings | None:
        """None when PLAYGROUND_VLLM_URL is unset or empty (no tab); a malformed URL or config is an error
        naming the variable, so a misconfigured app refuses to start."""
        env = os.environ if env is None else env
        url = (env.get(ENV_URL) or "").strip()
        if not url:
            return None
        client = VllmClient(url)  # checks the URL's form (VllmClientError names it)
        spec_text = (env.get(ENV_SPEC) or "").strip()
        return cls(client.url, parse_spec_config(spec_text) if spec_text else None,
                   (env.get(ENV_MODEL) or "").strip() or None)

    def client(self) -> VllmClient:
        return VllmClient(self.url, timeout=self.timeout, spec=self.spec)


@dataclass(frozen=True)
class ServerInfo:
    models: tuple[str, ...]
    speculative: bool
    k: int | None  # the operator's config's, else the number of draft positions in the server's counters


def server_info(settings: VllmSettings) -> ServerInfo:
    client = settings.client()
    client.check(settings.model)
    models = tuple(client.models())
    counters = client.spec_counters()
    k = settings.spec.k if settings.spec else ((len(counters.accepted_per_pos) if counters else 0) or None)
    return ServerInfo(models, counters is not None, k)


def header_markdown(settings: VllmSettings, info: ServerInfo | None = None, error: str | None = None) -> str:
    where = f"vLLM server at {_code(settings.url)} (set by the operator)"
    if error:
        return f"{where} \u00b7 \u26a0 {html.escape(redact(error), quote=False)}"
    if info is None:
        return f"{where} \u00b7 asking it what it serves \u2026"
    models = ", ".join(_code(m) for m in info.models) or "no model"
    if settings.spec is not None:
        spec = f"speculative: {_code(settings.spec.to_json())} ({ENV_SPEC})"
    elif info.speculative:
        spec = (f"speculative, k = {info.k} (from its /metrics; the method is not served back: the operator can "
                f"name it in {ENV_SPEC})" if info.k else "speculative (from its /metrics)")
    else:
        spec = "no speculative config (a plain server: no drafts to colour)"
    return f"{where} \u00b7 model {models} \u00b7 {spec}"


def _code(text: str) -> str:
    """A Markdown code span (entities are not decoded inside one: no escaping, only no backtick)."""
    return "`" + text.replace("`", "'") + "`"


# --- the token view ------------------------------------------------------------------------------------------


def role_runs(step: ServedStep) -> list[tuple[str, tuple[int, ...]]]:
    """The step's tokens as runs of one role, in order."""
    runs: list[tuple[str, list[int]]] = []
    for token, role in zip(step.emitted, step.roles):
        if runs and runs[-1][0] == role:
            runs[-1][1].append(token)
        else:
            runs.append((role, [token]))
    return [(role, tuple(ids)) for role, ids in runs]


def split_text(text: str, runs: Sequence[tuple[str, tuple[int, ...]]], detok: Callable | None,
               eos_last: bool = False) -> list[str] | None:
    """The step's text, one piece per run (None when it cannot be split): every run after the first takes its
    own detokenized text from the end. `eos_last`: the step's last token ended the request (its text is '')."""
    if len(runs) == 1:
        return [text]
    if detok is None:
        return None
    pieces, rest = [], text
    for i, (_, ids) in enumerate(reversed(runs[1:])):
        ids = ids[:-1] if eos_last and i == 0 else ids
        piece = detok(ids) if ids else ""
        if not rest.endswith(piece):
            return None
        pieces.append(piece)
        rest = rest[:len(rest) - len(piece)]
    return [rest, *reversed(pieces)]


def _tip(step: ServedStep, role: str, ids: Sequence[int]) -> str:
    head = "prompt pass" if step.index == 0 else f"engine step {step.index}"
    if step.n_drafted:
        head += f" \u00b7 verified {step.n_drafted} drafts, kept {step.n_accepted}"
    elif step.provisional and step.index:
        head += " \u00b7 live (roles settle when the request ends)"
    n = f"{len(ids)} tokens" if len(ids) > 1 else "token"
    lines = [head, f"{LIVE_LABEL[role]} ({ROLE_HELP.get(role, 'the target decided it')})",
             f"{n} {' '.join(map(str, ids))}"]
    if step.seconds is not None:
        lines.append(f"{1000 * step.seconds:.1f} ms since the previous chunk (drafting and verification together: "
                     "vLLM does not split them)")
    return "\n".join(lines)


class StepRenderer:
    """ServedSteps -> token HTML, one wrapper span per engine step (iterations alternate underlines, as the Run
    tab's). `detok(ids) -> text`: the server's detokenizer, for the steps that mix roles."""

    def __init__(self, detok: Callable[[Sequence[int]], str] | None = None):
        self._detok = detok
        self._cache: dict[tuple[int, ...], str] = {}
        self.parts: list[str] = []

    def detok(self, ids: Sequence[int]) -> str:
        key = tuple(ids)
        if key not in self._cache:
            self._cache[key] = self._detok(list(ids))
        return self._cache[key]

    def add(self, step: ServedStep, eos_last: bool = False) -> str:
        runs = role_runs(step)
        pieces = split_text(step.text, runs, self.detok if self._detok else None, eos_last)
        if pieces is None:  # one span, the step's roles in its hover text
            role = runs[0][0]
            tip = "\n".join(_tip(step, r, ids) for r, ids in runs)
            spans = [_span(step.text, LIVE_CLASS[role], tip, step.emitted)]
        else:
            spans = [_span(p, LIVE_CLASS[r], _tip(step, r, ids), ids) for p, (r, ids) in zip(pieces, runs)]
        parity = "odd" if len(self.parts) % 2 else "even"
        out = f'<span class="it {parity}" data-iteration="{step.index + 1}">{"".join(spans)}</span>'
        if step.finished:
            what = {"stop": "end of sequence", "length": "max new tokens reached"}.get(step.finished, step.finished)
            out += f'<span class="fin" title="the request stopped here">\u25a0 {html.escape(what)}</span>'
        self.parts.append(out)
        return out

    def html(self) -> str:
        return "".join(self.parts) or EMPTY_TOKENS


def _span(piece: str, cls: str, tip: str, ids: Sequence[int]) -> str:
    extra = " empty" if piece == "" else ""
    return (f'<span class="tok {cls}{extra}" data-token="{" ".join(map(str, ids))}" '
            f'title="{html.escape(tip, quote=True)}">{escape_piece(piece)}</span>')


def request_html(req: ServedRequest, detok: Callable | None = None) -> str:
    """The finished request's token view (its final steps and roles)."""
    r = StepRenderer(detok)
    for step in req.steps:
        r.add(step, eos_last=step is req.steps[-1] and req.finish_reason == "stop")
    return r.html()


def vllm_legend_html() -> str:
    chips = "".join(f'<span class="tok {ROLE_CLASS[r]}" title="{html.escape(ROLE_HELP[r], quote=True)}">'
                    f"{html.escape(ROLE_LABEL[r])}</span>" for r in (ACCEPTED, CORRECTION, BONUS, PLAIN))
    return (f'<div class="legend">{chips}<span class="legend-note"><span class="it even">engine</span>'
            '<span class="it odd">steps</span> alternate underlines \u00b7 while streaming, the target\'s own token '
            "is grey until the request ends \u00b7 p(x), q(x): not available from vLLM</span></div>")


# --- counters, histogram, metrics ----------------------------------------------------------------------------


def live_alpha(steps: Sequence[ServedStep], k: int | None) -> float | None:
    """accepted / (accepted + rejections) from the chunks so far, reading every decode step as k drafts (a step
    that kept fewer than k rejected one); None without k. The final value replaces it."""
    if not k:
        return None
    decode = [s for s in steps if s.index > 0]
    accepted = sum(len(s.emitted) - 1 for s in decode)
    rejected = sum(1 for s in decode if len(s.emitted) - 1 < k)
    return accepted / (accepted + rejected) if accepted + rejected else None


def vllm_counters_html(steps: Sequence[ServedStep], max_new: int, k: int | None,
                       req: ServedRequest | None = None) -> str:
    tokens = sum(len(s.emitted) for s in steps)
    if req is not None:
        alpha, alpha_tip = req.alpha, "accepted / (accepted + rejected) drafts, from vLLM's per-step metrics"
        mal = req.mean_acceptance_length
        tps, decode = req.tokens_per_s, req.decode_s
    else:
        alpha = live_alpha(steps, k)
        alpha_tip = "live: each step read as k drafts; exact when the request ends"
        mal = None
        tps = None
        decode = (steps[-1].elapsed_s - steps[0].elapsed_s) if steps else None
        if decode and tokens > 1:
            tps = (tokens - 1) / decode
    cards = [("steps", "Engine steps", str(len(steps)), "streamed steps, the prompt pass included"),
             ("alpha", "\u03b1 acceptance" + ("" if req else " (live)"), _num(alpha, 2), alpha_tip),
             ("mean_acceptance_length", "Tokens / verify step", _num(mal, 2),
              "vLLM's mean acceptance length: accepted drafts + 1 per verify step"),
             ("tokens_per_s", "Tokens / s", _num(tps, 1), "new tokens / decode time, prefill excluded"),
             ("elapsed", "Decode time", "\u2013" if decode is None else f"{decode:.2f} s", "first token to last"),
             ("new_tokens", "New tokens", f"{tokens} / {max_new}", "tokens streamed / max new tokens")]
    out = [cards_html(cards, "done" if req else "running")]
    if req is not None:
        out.append(f'<div class="counters-note">time to first token {req.ttft_s:.2f} s ({req.prompt_tokens} prompt '
                   "tokens), not counted in tokens/s</div>")
    return "".join(out)


def _num(x, digits: int) -> str:
    return "\u2013" if x is None else f"{x:.{digits}f}"


def histogram(req: ServedRequest) -> list[int]:
    """Verify steps by accepted drafts (index = accepted): vLLM's own, else rebuilt from the steps."""
    sent = req.spec_metrics.acceptance_histogram if req.spec_metrics else None
    if sent:
        return [int(n) for n in sent]
    h = req.acceptance_histogram
    return [h.get(a, 0) for a in range(max(h) + 1)] if h else []


def histogram_figure(req: ServedRequest | None):
    hist = histogram(req) if req is not None else []
    if not any(hist):
        why = "no verify steps (a plain server, or no drafts)" if req is not None else "no request yet"
        return charts.empty_figure(HIST_TITLE, why)
    x = list(range(len(hist)))
    total = sum(hist)
    data = [{"type": "bar", "x": x, "y": hist, "marker": {"color": charts.COLOURS.accepted},
             "text": [f"{n}" if n else "" for n in hist], "textposition": "outside", "cliponaxis": False,
             "textfont": {"size": 9}, "customdata": [n / total for n in hist],
             "hovertemplate": "%{x} drafts accepted<br>%{y} verify steps (%{customdata:.0%})<extra></extra>"}]
    mal = req.mean_acceptance_length
    title = HIST_TITLE + (f" \u2014 mean acceptance length {mal:.2f}" if mal else "")
    return charts._figure(data, title, charts.Axes("accepted drafts in the step", "verify steps", {"dtick": 1}),
                          showlegend=False)


def metrics_markdown(req: ServedRequest) -> str:
    """vLLM's per-request metrics as sent, then what vLLM does not expose, said as such."""
    rows = [("completion tokens", req.completion_tokens), ("finish reason", req.finish_reason),
            ("chunks (merged: held several steps)", f"{req.chunks} ({req.merged_chunks} merged)"),
            ("how the steps were told apart", req.schedule)]
    rows += [(f"vLLM `{k}`", v) for k, v in sorted((req.spec or {}).items()) if not k.startswith("per_step")]
    rows += [(f"vLLM `{k}`", v) for k, v in sorted(req.server_metrics.items())]
    rows += [("draft / verify time split", NOT_AVAILABLE), ("p(x), q(x)", NOT_AVAILABLE),
             ("rejected draft tokens", NOT_AVAILABLE + " (only their count)")]
    lines = ["| metric | value |", "|---|---|"]
    lines += [f"| {html.escape(str(k))} | {html.escape(_cell(v))} |" for k, v in rows]
    return "\n".join(lines)


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "\u2013" if v is None else str(v).replace("|", "\\|")


def sweep_row(concurrency: int, figures: ServedArmFigures) -> list:
    """One row of the concurrency table, from vllm_sweep.arm_figures."""
    mal = figures.mean_acceptance_length
    rate = figures.tokens_per_s
    return [concurrency, len(figures.completion_tokens), round(figures.aggregate_tokens_per_s, 1),
            None if rate is None else round(rate, 1), None if mal is None else round(mal, 2),
            round(figures.wall_s, 2), figures.merged_chunks]

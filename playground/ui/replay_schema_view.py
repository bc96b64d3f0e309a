"""The Replay tab's "what the schema is worth" table (no gradio here), under the k-per-shape table: for the turns
that carry a schema (a trace line's `tools`, one tool call), per output shape the share of its tokens the schema
forced, and per k (and controller) the chosen drafter's tokens per target pass free and constrained (schema+ the
drafter), with the constrained walk's predicted speed-up over constrained plain decoding. Built from the
`ReplayResult` alone (lab.replay.summary.schema_shape pooled it); nothing where no turn carries a schema.
"""

from __future__ import annotations

import html

from ..lab.shapes import SHAPES
from ..results.replay import ReplayResult, SchemaArm, SchemaShape

SHORT = {"json": "JSON / tool call", "code": "code", "copied": "copied text", "prose": "prose", None: "all tokens"}


def _shapes(result: ReplayResult) -> list[tuple[str | None, SchemaShape]]:
    summary = result.summary
    out = [(s, summary.shapes[s].schema) for s in SHAPES if summary.shapes[s].schema is not None]
    return out + ([(None, summary.overall.schema)] if summary.overall.schema is not None else [])


def _cell(a: SchemaArm | None) -> str:
    if a is None or a.free is None or a.constrained is None:
        return "<td>–</td>"
    speed = f" ({a.speedup:.2f}×)" if a.speedup is not None else ""
    return f"<td>{a.free:.2f} / {a.constrained:.2f}{speed}</td>"


def schema_html(result: ReplayResult, drafter: str) -> str:
    """The table (see the module docstring); "" when no turn carries a schema its recording keeps to."""
    shapes = _shapes(result)
    if not shapes:
        return ""
    head = ['<th class="name">k</th>'] + [f"<th>{html.escape(SHORT[s])}</th>" for s, _ in shapes]
    share = [('<th class="name" title="tokens the schema forced, walked as the schema+ drafters propose them">forced '
             'by the schema</th>')]
    share += [f"<td>{s.forced} of {s.tokens}" + (f" ({s.forced_share:.0%})" if s.forced_share is not None else "")
              + "</td>" for _, s in shapes]
    rows = [(f'<div class="whatif-scroll"><table class="whatif-table" data-table="replay-schema"><thead><tr>'
            f'{"".join(head)}</tr></thead><tbody><tr data-arm="forced">{"".join(share)}</tr>')]
    for arm in result.arms:
        cells = [_cell((s.drafters.get(drafter) or {}).get(arm)) for _, s in shapes]
        name = f"k = {arm[2:]}" if arm.startswith("k=") else f"{arm} k"
        rows.append(f'<tr data-arm="{html.escape(arm)}"><th class="name">{name}</th>{"".join(cells)}</tr>')
    rows.append("</tbody></table></div>")
    overall = shapes[-1][1]
    note = (f"<p class='small-note'>What the schema is worth, over the {overall.turns} turn(s) that carry one (a "
            f"trace line's <code>tools</code>, a turn that is one tool call; {overall.exact_turns} of them the "
            "masked target's greedy output, walked exactly): tokens per target pass of this drafter free / "
            "constrained (the schema's forced tokens, then this drafter), and in brackets the constrained run's "
            "predicted speed-up over constrained plain decoding.</p>")
    return "".join(rows) + note

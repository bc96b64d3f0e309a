"""How the app looks: its CSS and theme, and what `launch()` needs besides the app (Gradio 6 takes theme, css
and head at launch, not in Blocks()). The classes are the ones render.py, markup.py and verdicts.py write; the
grid of `#main` is the layout blocks.py describes."""

from __future__ import annotations

import gradio as gr

from .javascript import HEAD

CSS = """
.gradio-container { max-width: 1480px !important; }
#header h1 { font-size: 1.45rem; margin: 0 0 2px 0; }
#header p { margin: 0; color: var(--body-text-color-subdued); font-size: 0.92rem; }
#main { display: grid !important; grid-template-columns: minmax(300px, 4fr) minmax(0, 9fr);
        grid-template-areas: "essentials results" "settings results"; grid-template-rows: auto 1fr;
        align-items: start; gap: 12px 16px; }
#main > #essentials { grid-area: essentials; min-width: 0 !important; }
#main > #results { grid-area: results; min-width: 0 !important; }
#main > #settings { grid-area: settings; min-width: 0 !important; }
@media (max-width: 900px) {
  #main { grid-template-columns: minmax(0, 1fr); grid-template-areas: "essentials" "results" "settings";
          grid-template-rows: auto; }
}
#status { font-size: 0.85rem; color: var(--body-text-color-subdued); min-height: 1.4em; flex: 1 1 0% !important;
          min-width: 0 !important; overflow-wrap: anywhere; }
#status-row { align-items: center; gap: 8px; flex-wrap: nowrap; }
#status p { margin: 0; }
.status-more { display: inline; margin-left: 0.3em; }
p:has(+ .status-more) { display: inline; margin: 0; }  /* "more" on the line it folds */
.status-more > summary { display: inline; cursor: pointer; text-decoration: underline dotted; }
.status-more[open] > summary { display: block; }
#activity { flex: 0 0 auto !important; min-width: 0 !important; width: auto !important; padding: 0 !important;
            border: none !important; background: none !important; }
#activity [data-testid="status-tracker"] { display: none !important; }
#activity .html-container { opacity: 1 !important; padding: 0 !important; }
#activity .queue-note { display: none; }
#activity .queue-note.on { display: inline-block; white-space: nowrap; font-size: 0.8rem; padding: 2px 10px;
                           border-radius: 999px; background: #fef3c7; color: #92400e; border: 1px solid #fcd34d; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 14px; align-items: center; font-size: 0.8rem;
          color: var(--body-text-color-subdued); margin: 2px 0 6px 0; }
.legend .tok { padding: 1px 7px; }
.legend-note { margin-left: 4px; }
.legend .it::before { display: none; }
#tokens { padding: 0 !important; }
.token-box { font-family: var(--font-mono); font-size: 13.5px; line-height: 2.0; white-space: pre-wrap;
             word-break: break-word; min-height: 110px; max-height: 460px; overflow-y: auto; padding: 12px 14px;
             border: 1px solid var(--border-color-primary); border-radius: 10px;
             background: var(--block-background-fill); color: var(--body-text-color); }
#tokens .placeholder { color: var(--body-text-color-subdued); font-family: var(--font); font-style: italic; }
.tok { border-radius: 3px; padding: 2px 0; }
.tok.acc { background: #bbf7d0; color: #14532d; }
.tok.cor { background: #fecaca; color: #7f1d1d; }
.tok.bon { background: #bfdbfe; color: #1e3a8a; }
.tok.pln { background: #e5e7eb; color: #1f2937; }
.tok.frc { background: #e9d5ff; color: #581c87; }
.tok.lk { outline: 1px dashed #15803d; outline-offset: -1px; }
.tok.special { font-style: italic; opacity: 0.75; }
.tok:hover, .tok.picked { outline: 1.5px solid #111827; outline-offset: 0; }
.tok { cursor: pointer; }
.tok-detail { display: none; white-space: pre-line; font-size: 0.8rem; margin-top: 6px; padding: 6px 10px;
              border-radius: 8px; background: var(--background-fill-secondary); color: var(--body-text-color); }
.tok-detail.on { display: block; }
.tok .nl { opacity: 0.45; font-size: 0.85em; }
.it { padding-bottom: 1px; }
.it.even { border-bottom: 2px solid #818cf8; }
.it.odd { border-bottom: 2px solid #fbbf24; }
.it::before { content: ""; display: inline-block; width: 1px; height: 1.05em; margin: 0 1px;
              background: #94a3b8; vertical-align: -0.15em; opacity: 0.6; }
.fin { white-space: nowrap; margin-left: 6px; font-size: 0.75em; color: var(--body-text-color-subdued); font-family: var(--font); }
.counters { display: grid; grid-template-columns: repeat(6, minmax(0, 1fr)); gap: 8px; }
.counter { border: 1px solid var(--border-color-primary); border-radius: 10px; padding: 8px 10px;
           background: var(--block-background-fill); }
.counter .value { font-size: 1.35rem; font-weight: 650; font-variant-numeric: tabular-nums; line-height: 1.2; }
.counter .label { font-size: 0.75rem; color: var(--body-text-color-subdued); }
.counters.running .counter .value { color: var(--color-accent); }
.counters-note { font-size: 0.75rem; color: var(--body-text-color-subdued); margin-top: 4px; }
.check { font-size: 0.88rem; padding: 8px 10px; border-radius: 8px; border: 1px solid var(--border-color-primary); }
.check .badge { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 0.8rem; margin-left: 4px; }
.badge.ok { background: #dcfce7; color: #166534; }
.badge.bad { background: #fee2e2; color: #991b1b; }
.badge.na { background: #f3f4f6; color: #4b5563; }
.check-error { font-family: var(--font-mono), monospace; font-size: 0.8rem; color: #991b1b; margin-top: 4px; }
#prediction h4 { margin: 4px 0 6px 0; }
#prediction table { font-size: 0.86rem; border-collapse: collapse; width: auto; border: none !important; }
#prediction tr { border: none !important; }
#prediction th, #prediction td { border: none !important;
                                 border-bottom: 1px solid var(--border-color-primary) !important;
                                 padding: 4px 16px 4px 0 !important; background: none !important; }
#prediction td:nth-child(2), #prediction th:nth-child(2) { text-align: right; }
#prediction td:nth-child(-n+2), #prediction th:nth-child(-n+2) { white-space: nowrap; }
#prediction p { font-size: 0.8rem; color: var(--body-text-color-subdued); margin: 6px 0; }
#essentials, #settings { gap: 8px; }
.small-note { font-size: 0.78rem; color: var(--body-text-color-subdued); }
.trust { font-size: 0.85rem; padding: 8px 12px; border-radius: 8px; margin: 4px 0 8px 0; border: 1px solid; }
.trust .trust-head { font-weight: 650; }
.trust ul { margin: 4px 0 0 0; padding-left: 18px; }
.trust li { margin: 2px 0; }
.trust .fix { color: var(--body-text-color-subdued); }
.trust.ok { background: #f0fdf4; border-color: #bbf7d0; color: #14532d; }
.trust.warn { background: #fffbeb; border-color: #fde68a; color: #78350f; }
.trust.fail { background: #fef2f2; border-color: #fecaca; color: #7f1d1d; }
.glossary { font-size: 0.8rem; margin: 6px 0; }
.glossary summary { cursor: pointer; color: var(--link-text-color, #4f46e5); }
.glossary dl { margin: 6px 0 0 0; display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 3px 12px; }
.glossary dt { font-weight: 600; }
.glossary dd { margin: 0; color: var(--body-text-color-subdued); }
#sweep-table th, #sweep-table th *, #sweep-table td, #sweep-table td * { word-break: keep-all !important;
                                                                        overflow-wrap: normal !important; }
#whatif-intro p, #whatif-from p, #batch-note p { font-size: 0.85rem; color: var(--body-text-color-subdued); margin: 2px 0; }
#whatif-from-row { align-items: center; gap: 8px; }
#whatif-status { font-size: 0.88rem; min-height: 1.4em; }
.whatif-scroll { overflow-x: auto; max-width: 100%; }
.whatif-table { border-collapse: collapse; font-size: 0.8rem; font-variant-numeric: tabular-nums; width: auto;
                margin: 4px 0 10px 0; }
.whatif-table th, .whatif-table td { padding: 3px 5px; text-align: right; white-space: nowrap;
                                     border: 1px solid var(--border-color-primary); }
.whatif-table th { background: var(--background-fill-secondary); font-weight: 600; }
.whatif-table th.name { text-align: left; cursor: help; }
.whatif-table td.lose { background: #fee2e2; color: #7f1d1d; }
.whatif-table td.g1 { background: #f0fdf4; }
.whatif-table td.g2 { background: #dcfce7; }
.whatif-table td.g3 { background: #bbf7d0; }
.whatif-table td.g4 { background: #86efac; }
.whatif-table td.never { color: #991b1b; }
.whatif-table th.best, .whatif-table td.best { box-shadow: inset 0 2px 0 #6366f1; font-weight: 650; }
.whatif-table .you { outline: 2px solid #f59e0b; outline-offset: -2px; }
.whatif-grid td.top { font-weight: 700; }
.whatif-grid tr.mine th, .whatif-grid tr.run th { color: #1e3a8a; }
.whatif-grid .tag { font-size: 0.7rem; font-weight: 500; color: #92400e; margin-left: 4px; }
#batch-row { align-items: center; gap: 10px; flex-wrap: nowrap; }
#batch-btn { white-space: nowrap; }
#batch-status p { font-size: 0.85rem; margin: 0; }
#batch-note table { font-size: 0.78rem; width: auto; border-collapse: collapse; display: block; overflow-x: auto; }
#batch-note th, #batch-note td { white-space: nowrap; padding: 3px 8px !important; text-align: right; }
#preset-row { align-items: flex-end; flex-wrap: nowrap; }
#show-btn { margin-bottom: 2px; }
@media (max-width: 900px) { .counters { grid-template-columns: repeat(3, minmax(0, 1fr)); } }
@media (max-width: 480px) { .glossary dl { grid-template-columns: minmax(0, 1fr); } }
"""


def theme() -> gr.themes.Base:
    # Local font stacks only: the playground must render offline (no web-font downloads).
    return gr.themes.Default(
        primary_hue="indigo",
        secondary_hue="indigo",
        neutral_hue="slate",
        font=["Inter", "ui-sans-serif", "system-ui", "-apple-system", "Segoe UI", "Roboto", "sans-serif"],
        font_mono=["JetBrains Mono", "ui-monospace", "SFMono-Regular", "Menlo", "DejaVu Sans Mono", "monospace"],
    ).set(block_radius="10px", button_large_radius="8px")


def launch_kwargs() -> dict:
    """What launch() needs besides the app (Gradio 6 takes theme and css here, not in Blocks())."""
    return {"theme": theme(), "css": CSS, "head": HEAD, "footer_links": ["api", "gradio"]}

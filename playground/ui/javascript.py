"""The page's few lines of JavaScript, as strings (blocks.py and wiring.py attach them; theme.py puts HEAD in the page).

- HEAD: shows a queued event's place in line ("Queued: position 1 of 2 · 4 s") in the status row, read from
  Gradio's own (hidden) status tracker into `#activity .queue-note`, a span no event ever updates.
- `starting(what, target)`: the client-side first step of a device event's click (no server round trip): the
  status line says the event is starting (it may wait for the device) at once, never "Ready" while it waits,
  and the page scrolls so that the results are in view.
- `clear_stale_error`: a control the user changed clears an error on the status line that no longer holds.
- TOKEN_DETAILS: the token box's `js_on_load`: a tap or click on a token shows its details (what the hover
  text says) under the box, for touch screens that have no hover.
"""

from __future__ import annotations

import json

HEAD = """<script>
(() => {
  let since = 0;
  function show() {
    const slot = document.querySelector('#activity .queue-note');
    if (!slot) return;
    const tracker = document.querySelector('#activity [data-testid="status-tracker"]');
    const m = /queue:\\s*(\\d+)\\s*\\/\\s*(\\d+)/.exec(tracker ? tracker.textContent : '');
    if (m) {
      if (!since) since = Date.now();
      const s = Math.round((Date.now() - since) / 1000);
      slot.textContent = `Queued: position ${m[1]} of ${m[2]} waiting \\u00b7 ${s} s`;
      slot.classList.add('on');
    } else if (slot.classList.contains('on')) {
      slot.textContent = '';
      slot.classList.remove('on');
      since = 0;
    }
  }
  setInterval(show, 250);
})();
</script>"""

TOKEN_DETAILS = """
element.addEventListener('click', (event) => {
  const tok = event.target.closest('.tok');
  const box = element.querySelector('.tok-detail');
  if (!tok || !box || !element.contains(tok)) return;
  element.querySelectorAll('.tok.picked').forEach((t) => t.classList.remove('picked'));
  tok.classList.add('picked');
  box.textContent = tok.getAttribute('title') || '';
  box.classList.add('on');
});
"""


def starting(what: str, target: str = "#status-row") -> str:
    """JS for a click's first step: return the status line `what`, and bring `target` into view."""
    return f"""(...args) => {{
  const el = document.querySelector({json.dumps(target)});
  if (el) {{
    const r = el.getBoundingClientRect();
    if (r.top < 0 || r.top > window.innerHeight * 0.5) window.scrollBy(0, r.top - 8);  // a little margin above it
  }}
  return {json.dumps(what)};
}}"""


def clear_stale_error(ready: str) -> str:
    """JS: the status line as it is, unless it shows an error (a line starting with the warning sign)."""
    return f"(status) => (typeof status === 'string' && status.startsWith('\\u26a0')) ? {json.dumps(ready)} : status"

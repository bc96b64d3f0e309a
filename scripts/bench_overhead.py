"""What an iteration spends outside its draft, verify and rollback buckets, and what streaming to the browser
costs a run, on the embedded pair with the llama.cpp drafter at k = 4 (issue 14).

Two arms, alternating A B A B in one process, on each preset (tool_call, prose, code) in every round:
  A  headless: `list(speculative_generate(...))`, options=HEADLESS, as the lab runs it;
  B  the browser's Run event, with no server: the app's real Blocks (playground.ui.build_ui around the same loaded
     pair) and its "run" event driven through Gradio's own `Blocks.process_api`, update after update, as Gradio's
     queue drives it: the wiring's event function (ui/wiring.py), ui.run_panel.stream_run with the engine in its
     worker thread, the token HTML, counters and plotly figures of every update, each component's postprocess,
     the streaming diffs, and each message serialised as the queue's SSE route does.
  C  (--chromium) a real browser on the same cores: the same Blocks served on a loopback port and driven from
     Debian's Chromium (Playwright, headless), B's prompt typed into the box and Run clicked, its tokens/s read
     off the page's counters when the status says Done. What B does not show: the browser's own drawing, which
     on a 2-core machine takes cores from the run it shows.
Every arm's torch and llama.cpp work runs in a fresh thread that ends with the run (A in `in_thread`, B in the
app's own serving.Background), and the main thread runs none (the pair is loaded in one such thread too): a thread
that ran an OpenMP region keeps its team of worker threads, and while two teams are alive libgomp stops letting
idle workers spin (it throttles when it manages more threads than there are cores), which slowed a 2-thread decode
step by ~14% here (44.6 -> 50.9 ms once the main thread had run torch). A headless run in the main thread (the
CLI's way, one team) and one in a lone fresh thread (the browser's way) then cost the same, and B / A is the
rendering's and Gradio's cost alone.
Per arm: decode tokens/s (median, min-max), the median per-iteration share of each bucket (an iteration's wall
time runs from the previous one's end), and B/A of decode tokens/s per adjacent pair (median, min-max): the
streaming cost (C / A too, with --chromium; C has no records, so no time split). Prefill is excluded everywhere.
Run it on a quiet machine:

    .venv/bin/python scripts/bench_overhead.py --threads 2 --rounds 5 --chromium --out docs/results/NAME.json
    .venv/bin/python scripts/bench_overhead.py --rounds 1 --max-new-tokens 8     # a smoke run

`--out` writes the summaries (per arm and preset: decode tokens/s; per arm: the bucket shares; the adjacent-pair
ratios; the verdict) with the setup, the environment and the machine's load; scripts/results_tables.py draws the
table from it with `markdown`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import re
import statistics
import threading
import time
from dataclasses import dataclass

import psutil
import torch

from playground.backends.vllm_server import free_port
from playground.core.engine import HEADLESS, speculative_generate
from playground.core.records import summarize
from playground.core.timesplit import OUTSIDE_LIMIT, ROLLBACK_LIMIT, iteration_splits, median_shares, percent
from playground.drafters.registry import drafter_spec, make_proposer
from playground.envinfo import describe_setup, environment
from playground.inputs.presets import get_preset
from playground.lab.trust import MachineMonitor, Verdict
from playground.pairs.registry import choose_pair, load_choice
from playground.studies.bench_overhead import EXPERIMENT, markdown
from playground.ui import chromium

PRESETS = ("tool_call", "prose", "code")
STREAMING_LIMIT = 0.05  # streaming may cost at most this share of the headless decode speed
RUN_CONTROLS = {"prompt": None, "preset": None, "chat": False, "drafter": "llama.cpp", "k": 4, "decoding": "greedy",
                "temperature": 1.0, "top-k": 0, "top-p": 1.0, "max-new": 64, "seed": 0, "k-mode": "fixed",
                "min-confidence": 0.0, "constrain": False}


def headless(pair, ids, k: int, max_new: int) -> list:
    """Arm A: the engine's records, as the lab collects them."""
    return list(speculative_generate(pair, ids, proposer=make_proposer(pair, "llama.cpp"), k=k,
                                     max_new_tokens=max_new, options=HEADLESS))


class Browser:
    """Arm B: the app's Blocks around the loaded pair, and its Run event driven as Gradio's queue drives it."""

    def __init__(self, pair):
        import orjson
        from gradio.server_messages import ProcessGeneratingMessage
        from gradio.state_holder import SessionState

        from playground.ui import build_ui
        from playground.ui.serving import PairProvider

        self._dumps, self._message, self._state = orjson.dumps, ProcessGeneratingMessage, SessionState
        self.demo = build_ui(PairProvider(pair=pair))
        self.fn = next(fn for fn in self.demo.fns.values() if fn.api_name == "run")
        self.session_block = self.fn.inputs[0]  # the tab's gr.State
        self.events = 0
        self.updates = 0

    def inputs(self, controls: dict) -> list:
        """The event's inputs as the page sends them: each control by its elem_id; the tab's states (the session,
        the sliders' moves), which have none, are filled from the session state."""
        return [None if block.elem_id is None else controls[block.elem_id] for block in self.fn.inputs]

    def run(self, controls: dict) -> list:
        """Drive one Run event to its end; the records of the run it streamed."""
        return asyncio.run(self._drive(self.inputs(controls)))

    async def _drive(self, inputs: list) -> list:
        state = self._state(self.demo)
        self.events += 1
        event_id, iterator = f"bench-{self.events}", None
        while True:
            out = await self.demo.process_api(block_fn=self.fn, inputs=inputs, state=state, iterator=iterator,
                                              session_hash="bench", event_id=event_id, in_event_listener=True)
            iterator = out.pop("iterator", None)
            self._dumps(self._message(output=out, success=True).model_dump(), default=str)  # the SSE route's work
            self.updates += 1
            if not out["is_generating"]:
                break
        session = state[self.session_block._id]
        if session is None or session.run is None or not session.run.finished:
            raise RuntimeError("the Run event ended without a finished run")
        return session.run.records


@dataclass(frozen=True)
class Shown:
    """What arm C reads off the page after a run: the counters' figures (it has no records)."""

    tokens_per_s: float
    new_tokens: int
    target_passes: int


class Chromium:
    """Arm C: the Blocks of arm B served on a loopback port, driven from Debian's Chromium on this machine."""

    def __init__(self, pair, k: int, max_new: int, drafter: str = "llama.cpp"):
        from playwright.sync_api import sync_playwright

        from playground.ui import build_ui, launch
        from playground.ui.serving import PairProvider

        port = free_port()
        self.demo = build_ui(PairProvider(pair=pair))
        _, self.url, _ = launch(self.demo, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True,
                                quiet=True)
        self._playwright = sync_playwright().start()
        self._browser = chromium.launch_chromium(self._playwright)
        self.page = page = self._browser.new_page(viewport={"width": 1440, "height": 1000})
        page.set_default_timeout(600_000)
        page.goto(self.url)
        page.wait_for_selector("#run-btn")
        label = re.escape(drafter_spec(drafter).label)  # the whole label: "draft model", not "schema + draft model"
        page.locator("#drafter label", has_text=re.compile(rf"^\s*{label}\s*$")).click()
        for selector, value in (("#max-new input", max_new), ("#k input[type=number]", k)):
            page.locator(selector).fill(str(value))
            page.locator(selector).press("Tab")
        self._typed = None  # (prompt, chat) as the page holds them now

    def run(self, prompt: str, chat: bool = False) -> Shown:
        """One Run of `prompt` (as typed into the box, wrapped in the chat template or not), to its Done line."""
        page = self.page
        if (prompt, chat) != self._typed:
            page.locator("#prompt textarea").fill(prompt)
            page.locator("#chat input").set_checked(chat)
            self._typed = (prompt, chat)
        status = "document.querySelector('#status').textContent"  # the line whole: its timings may sit in a fold
        before = json.dumps(page.locator("#status").text_content())
        page.locator("#run-btn").click()
        # The click's first step replaces the last Done line; a run quicker than the first poll may already show its
        # own Done line, which differs from the last one (its timings) where the step in between was missed.
        page.wait_for_function(f"!{status}.includes('Done: ') || {status} !== {before}")
        # Polled twice a second: Playwright's default polls on every animation frame, which is work in the page.
        # (includes, not startsWith: the status row also shows Gradio's timer of the event after the run)
        page.wait_for_function(f"{status}.includes('Done: ') || {status}.includes('\\u26a0')", polling=500)
        if "Done: " not in page.locator("#status").inner_text():
            raise RuntimeError(f"the page's run failed: {page.locator('#status').inner_text()}")

        def value(key: str) -> str:
            return page.locator(f'#counters [data-counter="{key}"] .value').inner_text()

        return Shown(float(value("tokens_per_s")), int(value("new_tokens").split("/")[0]), int(value("iterations")))

    @staticmethod
    def cpu_s() -> float:
        """CPU time of this process's descendants so far: Playwright's driver and the browser it started."""
        total = 0.0
        for child in psutil.Process().children(recursive=True):
            try:
                times = child.cpu_times()
            except psutil.Error:  # a helper process that has just ended
                continue
            total += times.user + times.system
        return total

    def close(self) -> None:
        self._browser.close()
        self._playwright.stop()
        self.demo.close()


def fresh_thread(work):
    """work() in a new thread that ends with it (so that its OpenMP team ends too); its result."""
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("result", work()), name="bench-worker")
    worker.start()
    worker.join()
    if "result" not in out:
        raise RuntimeError("the worker thread failed (its traceback is above)")
    return out["result"]


def in_thread(run):
    """Arm A's runs, each in a fresh thread (no rendering), as the browser runs the engine."""
    return lambda name: fresh_thread(lambda: run(name))


def measure(arms: dict, presets, rounds: int) -> tuple[dict, dict, dict]:
    """Every arm on every preset, adjacent, in each round: decode tokens/s per (arm, preset), the iterations'
    splits per arm, and what each arm's first run per preset emitted (its tokens; arm C: its counts of new tokens
    and iterations)."""
    speeds = {(a, n): [] for a in arms for n in presets}
    splits: dict[str, list] = {a: [] for a in arms}
    outputs: dict[tuple[str, str], tuple] = {}
    for r in range(rounds):
        for name in presets:
            for arm, run in arms.items():
                records = run(name)
                if isinstance(records, Shown):  # arm C: the page's counters
                    s = records
                    outputs.setdefault((arm, name), (s.new_tokens, s.target_passes))
                else:
                    s = summarize(records)
                    splits[arm] += iteration_splits(records)
                    outputs.setdefault((arm, name), tuple(t for rec in records for t in getattr(rec, "emitted", ())))
                speeds[(arm, name)].append(s.tokens_per_s)
                print(f"round {r + 1}, {name}, {arm}: {s.tokens_per_s:.1f} tokens/s, {s.new_tokens} tokens in "
                      f"{s.target_passes} iterations", flush=True)
    return speeds, splits, outputs


def ratios(speeds: dict, presets, top: str, bottom: str) -> dict[str, list[float]]:
    """top / bottom decode tokens/s per adjacent pair (same round and preset)."""
    return {n: [t / b if b else float("nan") for t, b in zip(speeds[(top, n)], speeds[(bottom, n)])]
            for n in presets}


def spread(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def summarize_arms(speeds: dict, splits: dict, presets, arms) -> dict:
    """What the table needs: tokens/s per arm and preset, bucket shares per arm, and the adjacent-pair ratios."""
    out = {"tokens_per_s": {a: {n: spread(speeds[(a, n)]) for n in presets} for a in arms},
           "shares": {a: {"iterations": len(its), **median_shares(its)} for a, its in splits.items() if its},
           "ratios": {}}
    for top in arms[1:]:
        by_preset = ratios(speeds, presets, top, arms[0])
        out["ratios"][f"{top[0]} / {arms[0][0]}"] = {
            **{n: spread(xs) for n, xs in by_preset.items()}, "all": spread([x for xs in by_preset.values() for x in xs])}
    return out


def verdict_lines(doc: dict) -> list[str]:
    """The issue's limits, held or not: outside the buckets, rollback, and each streaming arm's cost."""
    shares = doc["shares"].values()
    outside = max(s["outside"] or 0.0 for s in shares)
    rollback = max(s["rollback"] or 0.0 for s in shares)
    held = {True: "held", False: "NOT held"}
    lines = [(f"outside the buckets < {OUTSIDE_LIMIT:.0%} of an iteration: {held[outside < OUTSIDE_LIMIT]} "
              f"({percent(outside)}, the larger arm median)"),
             f"rollback < {ROLLBACK_LIMIT:.0%}: {held[rollback < ROLLBACK_LIMIT]} ({percent(rollback)})"]
    for label, r in doc["ratios"].items():
        cost = 1 - r["all"]["median"]
        lines.append(f"{label}: cost < {STREAMING_LIMIT:.0%}: {held[cost < STREAMING_LIMIT]} ({100 * cost:+.1f}% of "
                     f"the headless speed, median of {r['all']['n']} pairs)")
    return lines


def run_arms(args, pair, presets) -> tuple:
    """Warm every arm up, then measure; the speeds, splits, outputs, machine load and the browser's cores."""
    ids = {name: p.prompt_ids(pair.tokenizer) for name, p in presets.items()}
    controls = {name: {**RUN_CONTROLS, "prompt": p.prompt_text(pair.tokenizer), "preset": name, "k": args.k,
                       "max-new": args.max_new_tokens} for name, p in presets.items()}
    browser = Browser(pair)
    # B's event loop runs in a thread of its own: Playwright's sync API (arm C) keeps one in the main thread.
    arms = {"A headless": in_thread(lambda name: headless(pair, ids[name], args.k, args.max_new_tokens)),
            "B browser": lambda name: fresh_thread(lambda: browser.run(controls[name]))}
    chrome = Chromium(pair, args.k, args.max_new_tokens) if args.chromium else None
    if chrome is not None:
        arms["C Chromium"] = lambda name: chrome.run(controls[name]["prompt"], controls[name]["chat"])
    first = next(iter(presets))
    for run in arms.values():  # warm-up, untimed: one run of each arm
        run(first)
    t0, browser_cpu0 = time.perf_counter(), Chromium.cpu_s()
    with MachineMonitor() as monitor:
        speeds, splits, outputs = measure(arms, presets, args.rounds)
    # Arm C's browser is what it measures, not a disturbance: the verdict counts the other processes without it.
    browser_cores = (Chromium.cpu_s() - browser_cpu0) / monitor.load.wall_s if chrome else None
    print(f"\n{time.perf_counter() - t0:.0f} s | {browser.updates} Gradio updates over {browser.events} B events")
    if chrome is not None:
        chrome.close()
    return list(arms), speeds, splits, outputs, monitor.load, browser_cores


def check_outputs(arms, presets, outputs) -> dict:
    """Whether the arms emitted the same (A, B: tokens; C: as many new tokens as A) on every preset."""
    same = {"A B tokens": all(len({outputs[(a, n)] for a in arms if a != "C Chromium"}) == 1 for n in presets)}
    if "C Chromium" in arms:  # C's page shows counts, not token ids
        same["C new tokens"] = all(outputs[("C Chromium", n)][0] == len(outputs[("A headless", n)]) for n in presets)
    for what, ok in same.items():
        print(f"same {what} on every preset: {'yes' if ok else 'NO'}")
    return same


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2, help="torch (and llama.cpp) threads (default 2)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of A B on every preset (default 5)")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="new tokens per run (default 64)")
    ap.add_argument("--k", type=int, default=4, help="proposals per iteration (default 4)")
    ap.add_argument("--presets", default=",".join(PRESETS), help="comma-separated presets (default %(default)s)")
    ap.add_argument("--pair", default=None, help="a named pair (default: the embedded one)")
    ap.add_argument("--chromium", action="store_true", help=f"arm C too: the app in {chromium.PATH} on this machine")
    ap.add_argument("--out", default=None, help="write the result (summaries, setup, machine load) as JSON here")
    args = ap.parse_args()
    if args.rounds < 1 or args.max_new_tokens < 1:
        ap.error("--rounds and --max-new-tokens must be at least 1")
    if args.chromium and not os.path.exists(chromium.PATH):
        ap.error(f"--chromium: {chromium.PATH} is missing (scripts/install_browser.sh installs it)")
    torch.set_num_threads(args.threads)
    pair = fresh_thread(lambda: load_choice(choose_pair(pair=args.pair), progress=None))
    presets = {name: get_preset(name) for name in args.presets.split(",")}
    drafter = fresh_thread(lambda: make_proposer(pair, "llama.cpp").describe())
    print(f"# {pair.target_name} | drafter: {drafter} | {describe_setup(pair)}")
    print(f"# k = {args.k}, {args.max_new_tokens} new tokens, greedy, {args.rounds} rounds of A (headless, a fresh "
          f"thread per run) and B (the browser's Run event through Gradio, no server), adjacent, on {', '.join(presets)}",
          flush=True)
    arms, speeds, splits, outputs, load, browser_cores = run_arms(args, pair, presets)
    others = dataclasses.replace(load, other_cores=max(0.0, load.other_cores - (browser_cores or 0.0)))
    verdict = Verdict.of(others.findings())
    result = {"experiment": EXPERIMENT, "date": time.strftime("%Y-%m-%d"), "setup": describe_setup(pair),
              "environment": environment(pair).to_dict(), "drafter": drafter, "k": args.k,
              "max_new_tokens": args.max_new_tokens, "rounds": args.rounds, "presets": list(presets),
              "machine": load.to_dict(), "other_cores": others.other_cores, "browser_cores": browser_cores,
              "verdict": verdict.to_dict(), "same_output": check_outputs(arms, presets, outputs),
              **summarize_arms(speeds, splits, presets, arms)}
    result["limits"] = verdict_lines(result)
    print("\n" + markdown(result) + "\n\n" + "; ".join(result["limits"])
          + ("" if verdict.trusted else " -- NOT TO BE TRUSTED: the machine was busy"))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The vLLM commands: `vllm-sweep` (the experiment), `vllm-serve` (a server kept running for a client) and
`vllm-report FILE` (a saved sweep's Markdown). The parsers are built here without importing the backend;
each command imports what it runs when it runs (see entry._dispatch)."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

from ..errors import PlaygroundError
from .progress import progress_bar

COMMANDS = ("vllm-sweep", "vllm-serve", "vllm-report")


def add_vllm_parsers(sub) -> None:
    s = sub.add_parser("vllm-sweep", help="plain vs speculative vLLM per preset kind, k, concurrency and method "
                                          "(starts its own servers; docs/vllm.md)")
    s.add_argument("--preset", action="append", help="a preset (repeatable; default: one per kind)")
    s.add_argument("--ks", default="1,2,4,8", help="num_speculative_tokens values (default 1,2,4,8)")
    s.add_argument("--concurrency", default="1,4", help="concurrent requests per batch (default 1,4)")
    s.add_argument("--methods", default="ngram", help="ngram, draft_model and/or suffix (needs arctic-inference in "
                                                      "vLLM's venv, which make setup installs), comma-separated "
                                                      "(default ngram)")
    s.add_argument("--suffix-factor", type=float, default=None,
                   help="suffix: vLLM's suffix_decoding_max_spec_factor (default vLLM's, 1; the playground's own "
                        "suffix drafter uses 4)")
    s.add_argument("--structured", action="store_true",
                   help="also measure each JSON preset constrained to its schema (OpenAI's response_format, vLLM's "
                        "structured outputs), plain and speculative alike, beside the free runs")
    s.add_argument("--rounds", type=int, default=1, help="adjacent plain/speculative rounds per cell (default 1)")
    s.add_argument("--max-new-tokens", type=int, default=None, help="default: each preset's own")
    s.add_argument("--lookup-min", type=int, default=1, help="n-gram: prompt_lookup_min (default 1)")
    s.add_argument("--lookup-max", type=int, default=3, help="n-gram: prompt_lookup_max (default 3, as our lookup)")
    _add_server_args(s)
    s.add_argument("--draft", default=None, help="draft_model's draft folder (default: the model itself)")
    s.add_argument("--plain-url", default=None, help="measure this running plain server instead of starting one "
                                                     "(with --spec-url and --spec; e.g. a GPU host or a Ray cluster)")
    s.add_argument("--spec-url", default=None, help="the running speculative server to measure against --plain-url")
    s.add_argument("--spec", default=None, help="--spec-url's speculative config as JSON (as it was started with)")
    s.add_argument("--our-loop", action="store_true",
                   help="also run the playground's own loop with its lookup on each n-gram cross-check prompt "
                        "(loads the model with transformers; --model embedded or a local folder)")
    s.add_argument("--out", help="write the JSON result here")
    s.add_argument("--markdown", help="write the Markdown report here (it is printed either way)")

    v = sub.add_parser("vllm-serve", help="start a vLLM server on 127.0.0.1 and keep it until Ctrl-C")
    v.add_argument("--spec", default=None,
                   help='a speculative config as JSON, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\' '
                        "(default: plain decoding)")
    v.add_argument("--port", type=int, default=None, help="default: a free port")
    _add_server_args(v)

    r = sub.add_parser("vllm-report", help="the Markdown tables of a saved vllm-sweep result (--out)")
    r.add_argument("file", metavar="FILE")


def _add_server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="embedded",
                   help="'embedded' (the embedded model's safetensors copy) or a local model folder")
    p.add_argument("--compiled", action="store_true",
                   help="vLLM's default torch.compile start (slower to start) instead of --enforce-eager")
    p.add_argument("--startup-timeout", type=float, default=600.0, help="seconds to wait for /health (default 600)")


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise PlaygroundError(f"--{name} takes comma-separated integers, got {text!r}") from None
    if not values:
        raise PlaygroundError(f"--{name} is empty")
    return values


def _model(args: argparse.Namespace) -> Path:
    if args.model == "embedded":
        from ..pairs.loading import ensure_embedded_safetensors  # imports transformers: only when it runs

        return ensure_embedded_safetensors(progress=lambda m: print(m, file=sys.stderr))
    path = Path(args.model).expanduser()
    if not (path / "config.json").is_file():
        raise PlaygroundError(f"--model: {args.model!r} is not a local model folder (no config.json); "
                              "vLLM runs offline here (HF_HUB_OFFLINE=1)")
    return path


def cmd_vllm(args: argparse.Namespace) -> int:
    if args.command == "vllm-report":
        from ..backends.vllm_report import load_sweep, report_text  # on use (see entry._dispatch)

        print(report_text(load_sweep(args.file)))
        return 0
    from ..backends.vllm_server import vllm_available  # on use (see entry._dispatch)

    starts_servers = args.command == "vllm-serve" or not (args.plain_url or args.spec_url)
    ok, why = vllm_available()
    if starts_servers and not ok:
        raise PlaygroundError(why)
    if starts_servers and threading.current_thread() is threading.main_thread():
        # SIGTERM (a service manager, `kill`) stops a command as Ctrl-C does, so the servers it started leave
        # with it (each `with server:` stops its own process group); without this a killed sweep left its
        # server running.
        signal.signal(signal.SIGTERM, _interrupt)
    if args.command == "vllm-serve":
        return _serve(args)
    return _sweep(args)


def _serve(args: argparse.Namespace) -> int:
    from ..backends.vllm_server import VllmServer, parse_spec_config  # on use (see entry._dispatch)

    spec = parse_spec_config(args.spec)  # a malformed config fails here, before anything starts
    server = VllmServer(_model(args), spec, port=args.port, enforce_eager=not args.compiled,
                        startup_timeout=args.startup_timeout)
    print(f"starting vLLM ({server.describe_config()}) ...", file=sys.stderr)
    with server:
        print(json.dumps(server.describe(), indent=1))
        print(f"serving at {server.url} (for VllmClient or vllm-sweep --spec-url); Ctrl-C stops it",
              file=sys.stderr)
        try:
            while server.proc is not None and server.proc.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            print("\nstopping", file=sys.stderr)
            return 0
    raise PlaygroundError(f"the vLLM server exited; the end of its log:\n{server.log_tail()}")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _sweep(args: argparse.Namespace) -> int:
    from ..backends.vllm_report import report_text  # on use (see entry._dispatch)
    from ..backends.vllm_sweep import SweepPlan, run_sweep  # on use, as above
    from ..inputs.presets import chosen_presets  # on use, as above

    presets = chosen_presets(args.preset)
    external = None
    if args.plain_url or args.spec_url or args.spec:
        from ..backends.vllm_server import parse_spec_config  # on use, as above

        if not (args.plain_url and args.spec_url and args.spec):
            raise PlaygroundError("measuring running servers takes all three of --plain-url, --spec-url and --spec")
        external = (args.plain_url, args.spec_url, parse_spec_config(args.spec))
        if external[2] is None:
            raise PlaygroundError("--spec is the speculative server's config, not plain")
    plan = SweepPlan(model=Path(args.model) if external else _model(args), presets=presets, ks=_ints(args.ks, "ks"),
                     concurrencies=_ints(args.concurrency, "concurrency"),
                     methods=[m.strip() for m in args.methods.split(",") if m.strip()], rounds=args.rounds,
                     max_new_tokens=args.max_new_tokens, lookup_min=args.lookup_min, lookup_max=args.lookup_max,
                     draft=Path(args.draft) if args.draft else None, suffix_factor=args.suffix_factor,
                     enforce_eager=not args.compiled,
                     server_options={"startup_timeout": args.startup_timeout}, external=external,
                     structured=args.structured)
    plan.check()  # bad values fail before a server starts
    arms = (f"the running servers {external[0]} (plain) and {external[1]} ({external[2].label})" if external else
            f"{len(plan.methods)} method(s) x k {list(plan.ks)}; {'eager' if plan.enforce_eager else 'compiled'} servers")
    print(f"# vllm-sweep: {len(presets)} preset(s) x concurrency {list(plan.concurrencies)} x {plan.rounds} round(s) "
          f"x {arms}", file=sys.stderr)
    our_pair = None
    if args.our_loop:
        from ..pairs.loading import load_pair  # imports torch: only with --our-loop

        our_pair = load_pair(str(plan.model), None, device="cpu", dtype="float32", progress=None)
    result = run_sweep(plan, progress=progress_bar(every_tick=True), log=lambda m: print(m, file=sys.stderr), our_pair=our_pair)
    result.command = "python -m playground " + shlex.join(args.argv)
    text = report_text(result)
    print(text)
    if args.out:
        result.save(args.out)
        print(f"wrote {args.out}", file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(text)
        print(f"wrote {args.markdown}", file=sys.stderr)
    return 0

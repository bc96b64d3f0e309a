"""Do a model drafter's proposals depend on how it is fed? Why replay feeds model drafters as a live run does.

For each preset, the target's greedy completion; then at every completion position t the drafter's proposal and
its distribution q after the same text, fed three ways through the proposer's own begin / propose / rollback:
  one-by-one   every token in its own call (the shared pass of a fast replay);
  last-two     as one-by-one, but the last two tokens in one call (a live run's catch-up after a fully accepted
               iteration: the last accepted proposal and the bonus token);
  one-chunk    the whole completion so far in one call after the prompt.
Printed: per drafter and way, the positions whose proposal differs from one-by-one's, and the largest change of
log q over the tokens q gives more than 1e-4. With llama.cpp (batched decode) and the int8 draft (dynamic
activation quantization, scaled per call) both are far above rounding, so only the live feeding reproduces a live
run; a drafter in full precision would show rounding only.

    .venv/bin/python scripts/replay_feeding.py --presets tool_call,prose,json_extract --threads 2
"""

from __future__ import annotations

import argparse

import torch

from playground.core.proposal import RunContext
from playground.core.sampling import GREEDY
from playground.drafters.registry import available_drafters, drafter_spec, make_proposer
from playground.envinfo import describe_setup
from playground.lab.replay import preset_turns
from playground.pairs.registry import choose_pair, load_choice


def proposal_after(proposer, prompt, completion, t, way):
    """The drafter's (token, log q) at completion position t after feeding prompt + completion[:t] `way`."""
    ctx = RunContext(GREEDY, GREEDY.generator("cpu"), frozenset())
    proposer.begin(prompt, ctx)
    committed = list(prompt)
    if way != "one-chunk":
        split = t - 2 if way == "last-two" and t >= 2 else t
        for x in completion[:split]:  # one token per call, as the shared pass feeds
            proposer.propose(committed, 1)
            committed.append(x)
            proposer.rollback(committed)
    committed = list(prompt) + list(completion[:t])
    p = proposer.propose(committed, 1)
    return p.tokens[0], torch.log(p.q[0].clamp_min(1e-30))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", default="tool_call,prose,json_extract")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_choice(choose_pair(), progress=None)
    print(f"# {pair.target_name} | {describe_setup(pair)}")
    for turn in preset_turns(pair, args.presets.split(","), args.max_new_tokens):
        for drafter in [d for d in available_drafters(pair) if drafter_spec(d).model]:
            proposer = make_proposer(pair, drafter)
            base = [proposal_after(proposer, turn.prompt_ids, turn.completion_ids, t, "one-by-one")
                    for t in range(len(turn.completion_ids))]
            for way in ("last-two", "one-chunk"):
                flips, worst = [], 0.0
                for t, (x0, lq0) in enumerate(base):
                    x, lq = proposal_after(proposer, turn.prompt_ids, turn.completion_ids, t, way)
                    if x != x0:
                        flips.append(t)
                    keep = lq0 > -9.2  # q > 1e-4
                    worst = max(worst, float((lq - lq0)[keep].abs().max()))
                print(f"{turn.name:12s} {drafter:9s} {way:9s}: proposal differs at {flips or 'no position'}; "
                      f"largest |change of log q| {worst:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

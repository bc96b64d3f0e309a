"""Speed: plain against speculative decoding in adjacent runs, with the cost model's prediction beside
each figure; the k sweep of one prompt.

The package: run (speed and sweep: the runs in their order), request (what they are asked to measure:
SpeedRequest), cells (a result's cells: predictions, medians per k and prompt, verdicts), schema (the constrained
arms of --schema) and trace (a recorded trace's turns as the prompts of `speed --trace`, with the history an agent
had; imported where used, since it reads replay's walks).
"""

from .request import PLAIN_EVERY, SpeedRequest
from .run import MEMORY_SCOPES, bracketed, speed, sweep
from .schema import constrained_drafter

__all__ = ["MEMORY_SCOPES", "PLAIN_EVERY", "SpeedRequest", "bracketed", "constrained_drafter", "speed", "sweep"]

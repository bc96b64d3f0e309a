"""The lab: experiments built on the one loop (calibration, speed, quality, peers; report draws their tables), each
returning a result (playground.results: saved as JSON) that records the environment and the raw measurements, so a
result can be re-read and re-plotted without re-running.

Speed is only ever compared in adjacent runs: plain and speculative runs alternate, in an order that rotates
from round to round, ratios are taken within a round, and medians over rounds are quoted with their spread.
"""

from .calibration import CalibrationPlan, CalibrationStore, Timing, calibrate, calibrated_timing
from .peers import peers
from .quality import DistributionPlan, acceptance, distribution, divergence

# The speed experiment (lab.speed: SpeedRequest, speed, sweep) is imported from its own package, not re-exported here:
# its arms run through playground.run, which imports the calibration from this package.

__all__ = ["CalibrationPlan", "CalibrationStore", "DistributionPlan", "Timing", "acceptance", "calibrate",
           "calibrated_timing", "distribution", "divergence", "peers"]

"""The performance model: step times, KV transfer, operating points, estimates, calibration.

Pure functions over :class:`~pdtrt.perf.hardware.Instance` (model x GPU x parallelism x
precision) and fitted :class:`~pdtrt.perf.factors.EfficiencyFactors`; formulas are in each
module's docstring. The simulator (:mod:`pdtrt.sim`) uses the same step times.
"""

from pdtrt.perf.estimate import Estimate, Load, ServingConfig, estimate
from pdtrt.perf.factors import EfficiencyFactors, load_factors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import KVLink, kv_link, kv_transfer_s
from pdtrt.perf.step import StepTime, StepWork, step_time

__all__ = ["EfficiencyFactors", "Estimate", "Instance", "KVLink", "Load", "ServingConfig",
           "StepTime", "StepWork", "estimate", "kv_link", "kv_transfer_s", "load_factors",
           "step_time"]

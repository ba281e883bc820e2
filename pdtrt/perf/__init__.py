"""The performance model: step times, scheduling, KV transfer, operating points, estimates.

Step times (:mod:`~pdtrt.perf.step`) sum kernel times measured per GPU and dtype
(:mod:`~pdtrt.perf.kernels`, derived by :mod:`~pdtrt.perf.kernel_derive`) plus fitted engine
terms (:mod:`~pdtrt.perf.factors`, :mod:`~pdtrt.perf.calibrate`); TensorRT-LLM's admission and
batching (:mod:`~pdtrt.perf.scheduling`) turn them into operating points
(:mod:`~pdtrt.perf.point`) and closed loops (:mod:`~pdtrt.perf.closed_loop`); an estimate
(:mod:`~pdtrt.perf.estimate`) carries its limits, borrowed efficiencies and the error band of
its nearest validated regime (:mod:`~pdtrt.perf.validation`). Formulas are in each module's
docstring. The simulator (:mod:`pdtrt.sim`) uses the same step times.
"""

from pdtrt.perf.estimate import Estimate, Load, ServingConfig, estimate
from pdtrt.perf.factors import EfficiencyFactors, load_factors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.kernels import KernelFactors, load_kernel_factors
from pdtrt.perf.link import KVLink, kv_link, kv_transfer_s
from pdtrt.perf.scheduling import CapacityPolicy
from pdtrt.perf.step import StepTime, StepWork, step_time

__all__ = ["CapacityPolicy", "EfficiencyFactors", "Estimate", "Instance", "KVLink",
           "KernelFactors", "Load", "ServingConfig", "StepTime", "StepWork", "estimate",
           "kv_link", "kv_transfer_s", "load_factors", "load_kernel_factors", "step_time"]

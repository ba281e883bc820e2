"""The planner's search space: which configurations are worth evaluating at all.

Dimensions: serving mode; GPU type per phase (``--gpus``, any mix for disaggregated); TP per
phase (the model's valid TPs within one node that hold a sequence); instance counts; engine
limits (aggregated ``max_num_tokens`` 2048 -- short chunks, less decode stall -- or 8192; decode
``max_batch_size`` = what the KV holds, capped at 512; prefill ``max_num_tokens`` 8192 or
16384 when prompts are long). Instance counts start at the fewest that keep every utilisation
below ``MAX_UTILISATION`` at the target rate (from the step-time model, prompts sharing steps
as the engine batches them: :mod:`pdtrt.perf.batching`) and go a few above
(with an ITL target, decode pools and aggregated instances are sized for the largest batch
whose step meets it), so the
space stays small -- hundreds of points, not the full product -- and bounded by ``max_gpus``
and ``budget``, and per GPU type by ``max_gpus_per_type``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from pdtrt.enums import KVDType, ServingMode, WeightQuant
from pdtrt.facts.catalog import GPU
from pdtrt.facts.model import ModelFacts
from pdtrt.perf.batching import prompt_steps
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import kv_link
from pdtrt.perf.step import decode_work, prefill_chunk_work, prefill_time_s, step_time

__all__ = ["MAX_UTILISATION", "SearchBounds", "candidate_configs"]

MAX_UTILISATION = 0.9
EXTRA_INSTANCES = 3


@dataclass(frozen=True, kw_only=True)
class SearchBounds:
    max_gpus: int | None = None
    budget_usd_per_hour: float | None = None
    max_gpus_per_type: dict[str, int] = field(default_factory=dict)  # GPU key -> cards

    def allows(self, config: ServingConfig,
               extra_decode: Sequence[tuple[Instance, int]] = ()) -> bool:
        """Whether ``config`` (with ``extra_decode`` replicas beside its decode pool: a mixed
        pool) is within every bound."""
        extra_gpus = sum(inst.num_gpus * n for inst, n in extra_decode)
        if self.max_gpus is not None and config.num_gpus + extra_gpus > self.max_gpus:
            return False
        if self.max_gpus_per_type and not self._per_type_ok(config, extra_decode):
            return False
        extra_cost = sum(inst.price_per_hour_usd() * n for inst, n in extra_decode)
        if self.budget_usd_per_hour is not None and (
                config.cost_per_hour_usd() + extra_cost > self.budget_usd_per_hour + 1e-9):
            return False
        return True

    def _per_type_ok(self, config: ServingConfig,
                     extra_decode: Sequence[tuple[Instance, int]]) -> bool:
        pools = [(config.prefill, config.prefill_instances), *extra_decode]
        if config.decode is not None and config.mode is ServingMode.DISAGGREGATED:
            pools.append((config.decode, config.decode_instances))
        used: dict[str, int] = {}
        for inst, n in pools:
            used[inst.gpu.key] = used.get(inst.gpu.key, 0) + inst.num_gpus * n
        return all(n <= self.max_gpus_per_type.get(key, n) for key, n in used.items())


def _instances(model: ModelFacts, gpus: Sequence[GPU], *, seq_len: int, weights: WeightQuant,
               kv_dtype: KVDType, **limits: int) -> Iterator[Instance]:
    for gpu in gpus:
        if weights is WeightQuant.FP8 and not gpu.has_fp8:
            continue
        if kv_dtype is KVDType.FP8 and not gpu.has_fp8:
            continue
        for tp in model.valid_tps(gpu.max_gpus_per_node):
            inst = Instance(model=model, gpu=gpu, tp=tp, weights=weights, kv_dtype=kv_dtype,
                            **limits)
            if inst.memory(seq_len).max_concurrent_seqs >= 1:
                yield inst


def _fewest(load: Callable[[int], float], most: int = 4096) -> int:
    """The fewest instances ``n`` whose ``load(n)`` (a utilisation) is below
    ``MAX_UTILISATION`` (``most`` when none is)."""
    lo, hi = 1, most
    if load(hi) >= MAX_UTILISATION:
        return most
    while lo < hi:  # load falls as instances are added
        mid = (lo + hi) // 2
        if load(mid) < MAX_UTILISATION:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _decode_batch(inst: Instance, f: EfficiencyFactors, context: float,
                  itl_target_s: float | None) -> tuple[int, float]:
    """The decode batch an instance is sized for, and its step time: all it holds, or with an
    ITL target the largest batch whose step meets it."""
    batch = inst.max_batch_size
    tau = step_time(decode_work(batch, int(batch * context)), inst, f).total_s
    while itl_target_s is not None and batch > 1 and tau > itl_target_s:
        batch = max(1, int(batch * 0.8))
        tau = step_time(decode_work(batch, int(batch * context)), inst, f).total_s
    return batch, tau


def _with_batch(inst: Instance, seq_len: int) -> Instance:
    from dataclasses import replace

    cap = inst.memory(seq_len).max_concurrent_seqs
    return replace(inst, max_batch_size=max(1, min(cap, 512)))


def candidate_configs(model: ModelFacts, gpus: Sequence[GPU], f: EfficiencyFactors, *,
                      isl: int, osl: int, rate_per_s: float, weights: WeightQuant,
                      kv_dtype: KVDType, bounds: SearchBounds, itl_target_s: float | None = None,
                      same_node: bool = False, prefill_isl: int | None = None,
                      context: float | None = None) -> Iterator[ServingConfig]:
    """Every configuration of the space (see module doc) within ``bounds``. ``isl`` is the
    longest prompt (engine limits, what must fit in memory); a chat workload with block reuse
    computes fewer tokens per prefill (``prefill_isl``, default ``isl``: instance counts) and
    decodes at a mean context of ``context`` tokens (default ``isl + osl / 2``)."""
    seq = isl + osl
    context = isl + osl / 2 if context is None else context
    computed = isl if prefill_isl is None else prefill_isl
    # -- aggregated ------------------------------------------------------------------------
    for tokens in (2048, 8192):
        for inst in _instances(model, gpus, seq_len=seq, weights=weights, kv_dtype=kv_dtype,
                               max_num_tokens=tokens):
            inst = _with_batch(inst, seq)
            # Two guesses; the range covers both, the screen and the simulation decide.
            # Fewest: a prompt rides in the decode steps (in-flight batching) and costs what
            # it adds to them, at the largest batch whose step meets the ITL target.
            batch, tau = _decode_batch(inst, f, context, itl_target_s)
            dec = decode_work(batch, int(batch * context))
            t_pf = step_time(dec + prefill_chunk_work(computed), inst, f).total_s - tau
            n_lo = max(1, math.ceil(rate_per_s * (t_pf + (osl - 1) * tau / batch)
                                    / MAX_UTILISATION))
            # Most: a prompt costs a prefill of its own and decodes run 64 at a time (the
            # steps it stretches must stay within the ITL target: long prompts, tight targets)
            small = min(inst.max_batch_size, 64)
            tau_small = step_time(decode_work(small, int(small * context)), inst, f).total_s
            n_hi = max(1, math.ceil(rate_per_s * (prefill_time_s(inst, f, computed)
                                                  + (osl - 1) * tau_small / small)
                                    / MAX_UTILISATION))
            for n in range(min(n_lo, n_hi), n_hi + EXTRA_INSTANCES + 1):
                cfg = ServingConfig(mode=ServingMode.AGGREGATED, prefill=inst,
                                    prefill_instances=n)
                if bounds.allows(cfg):
                    yield cfg
    # -- disaggregated ---------------------------------------------------------------------
    prefills = [p for tokens in ((8192, 16384) if isl > 4096 else (8192,))
                for p in _instances(model, gpus, seq_len=isl, weights=weights,
                                    kv_dtype=kv_dtype, max_num_tokens=tokens, max_batch_size=8)]
    decodes = []  # (instance, first guess of its count)
    for dec in _instances(model, gpus, seq_len=seq, weights=weights, kv_dtype=kv_dtype,
                          max_num_tokens=1024):
        dec = _with_batch(dec, seq)
        batch, tau = _decode_batch(dec, f, context, itl_target_s)
        # one instance runs `batch` sequences, each holding its slot for (osl - 1) steps
        per_instance_rate = batch / max((osl - 1) * tau, 1e-9)
        decodes.append((dec, max(1, math.ceil(rate_per_s
                                              / (per_instance_rate * MAX_UTILISATION)))))
    for pre in prefills:
        # prompts share prompt-only steps (the fewest instances), or one prefill each (the
        # old, unbatched guess: it holds a tight TTFT target's queueing); the range covers both
        a_lo = _fewest(lambda a, pre=pre: prompt_steps(
            pre, f, isl=computed, rate_per_s=rate_per_s / a).utilisation)
        a_hi = max(a_lo, math.ceil(rate_per_s * prefill_time_s(pre, f, computed)
                                   / MAX_UTILISATION))
        for dec, b0 in decodes:
            link = kv_link(pre.gpu, dec.gpu, same_node=same_node)
            for a in range(a_lo, a_hi + EXTRA_INSTANCES):
                for b in range(max(1, b0 - 1), b0 + EXTRA_INSTANCES + 1):
                    cfg = ServingConfig(mode=ServingMode.DISAGGREGATED, prefill=pre,
                                        prefill_instances=a, decode=dec, decode_instances=b,
                                        link=link)
                    if bounds.allows(cfg):
                        yield cfg

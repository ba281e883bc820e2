"""Building :class:`ServingConfig` s from a deployment spec or from explicit choices.

Defaults when a spec leaves an engine limit out: ``max_num_tokens`` 8192 (trtllm-build's
default); ``max_batch_size`` 256 on aggregated and decode instances (the KV capacity still
caps the running sequences) and 8 on prefill instances (prefill steps are compute-bound, more
prompts per step only add latency).

Whether the two pools share a node is read from the KV transports: a spec whose UCX transports
are all intra-node (``sm``, ``shm``, ``cuda_ipc``, ``cuda_copy``, ...) is one node; any network
transport (``rc``, ``tcp``, ``ud``, ``dc``, ``ib``, ``all``) means the KV crosses a NIC.
"""

from __future__ import annotations

from dataclasses import replace

from pdtrt.blueprint.deployment import Deployment
from pdtrt.enums import DType, KVDType, Phase, ServingMode, WeightQuant
from pdtrt.facts.catalog import GPU
from pdtrt.facts.model import ModelFacts
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import kv_link

__all__ = ["aggregated_baseline", "instance_for_pool", "make_instance",
           "serving_from_deployment", "spec_same_node"]

DEFAULT_MAX_NUM_TOKENS = 8192
DEFAULT_MAX_BATCH_SIZE = {Phase.PREFILL: 8, Phase.DECODE: 256}
_NETWORK_TRANSPORTS = {"rc", "rc_x", "rc_v", "ud", "ud_x", "dc", "dc_x", "ib", "tcp", "all"}


def _priced(gpu: GPU, price: float | None) -> GPU:
    return gpu if price is None else gpu.model_copy(update={"price_per_hour_usd": price})


def instance_for_pool(dep: Deployment, phase: Phase, *, aggregated: bool = False) -> Instance:
    """The instance of ``phase``'s pool (``aggregated``: serving both phases)."""
    spec, pool = dep.spec, dep.spec.pool(phase)
    eng = pool.engine
    default_batch = DEFAULT_MAX_BATCH_SIZE[Phase.DECODE if aggregated else phase]
    return Instance(
        model=dep.model, gpu=_priced(dep.gpus[phase], dep.price_per_hour_usd(phase)),
        tp=pool.tp, pp=pool.pp, dtype=spec.model.dtype, weights=spec.weights(phase),
        kv_dtype=spec.kv_cache_dtype(phase),
        max_batch_size=eng.max_batch_size or default_batch,
        max_num_tokens=eng.max_num_tokens or DEFAULT_MAX_NUM_TOKENS,
        tokens_per_block=eng.tokens_per_block,
        kv_cache_fraction=eng.kv_cache_free_gpu_mem_fraction)


def spec_same_node(dep: Deployment) -> bool:
    return not (set(dep.spec.kv_transfer.transports) & _NETWORK_TRANSPORTS)


def serving_from_deployment(dep: Deployment) -> ServingConfig:
    """The disaggregated configuration a spec describes."""
    pre = instance_for_pool(dep, Phase.PREFILL)
    dec = instance_for_pool(dep, Phase.DECODE)
    return ServingConfig(
        mode=ServingMode.DISAGGREGATED, prefill=pre,
        prefill_instances=dep.spec.prefill.instances, decode=dec,
        decode_instances=dep.spec.decode.instances,
        link=kv_link(pre.gpu, dec.gpu, same_node=spec_same_node(dep)))


def aggregated_baseline(dep: Deployment, *, instances: int | None = None) -> ServingConfig:
    """Aggregated serving on the prefill pool's GPU type, by default with as many GPUs as the
    whole disaggregated deployment has (the baseline the seed scenario compares against)."""
    inst = instance_for_pool(dep, Phase.PREFILL, aggregated=True)
    eng = dep.spec.prefill.engine
    if eng.max_batch_size is not None and eng.max_batch_size < DEFAULT_MAX_BATCH_SIZE[
            Phase.DECODE]:
        # a prefill engine's small batch limit would starve decode; use the decode pool's
        inst = replace(inst, max_batch_size=dep.spec.decode.engine.max_batch_size
                       or DEFAULT_MAX_BATCH_SIZE[Phase.DECODE])
    total = dep.spec.prefill.num_gpus + dep.spec.decode.num_gpus
    n = instances or max(1, total // inst.num_gpus)
    return ServingConfig(mode=ServingMode.AGGREGATED, prefill=inst, prefill_instances=n)


def make_instance(model: ModelFacts, gpu: GPU, *, tp: int, weights: WeightQuant,
                  kv_dtype: KVDType, max_batch_size: int, max_num_tokens: int,
                  dtype: DType = DType.BF16) -> Instance:
    return Instance(model=model, gpu=gpu, tp=tp, dtype=dtype, weights=weights,
                    kv_dtype=kv_dtype, max_batch_size=max_batch_size,
                    max_num_tokens=max_num_tokens)

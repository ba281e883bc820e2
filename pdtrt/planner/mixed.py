"""Mixed decode pools: the decode cards a plan may use of one GPU type, topped up with a few
replicas of another type beside them (issue 47, item 4).

Where a GPU type is bounded -- the user owns cards of it (``--have l40s:8``) or caps it
(``--max-gpus l40s:8``) -- a disaggregated configuration may put every card of that type its
prefill pool leaves on decode and add 1 to :data:`EXTRA_DECODE` decode replicas of another
searched type at the same TP (the spec gives a pool one TP and one engine section: an
endpoint names only its ``gpu``). Such a pool is routed by KV capacity (the router's
``kv_capacity``, the simulator's ``kv-capacity`` decode routing), so each replica takes the
share of the requests its KV blocks hold; the analytical screen follows that: each type's
replicas are screened at their share (:func:`mixed_point`), and the pool's point is its worse
type's. Unbounded types get no mixed pool (renting one type more is what the single-type
search already covers), nor does a chat workload (its ``kv_aware`` routing and the mixed
pool's ``kv_capacity`` would have to share the spec's one ``router.routing``).

A mixed pool is a :class:`~pdtrt.perf.estimate.ServingConfig` (its decode replicas of the
bounded type) plus :data:`ExtraDecode`, the form :class:`pdtrt.sim.SimConfig` takes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from pdtrt.enums import ServingMode
from pdtrt.perf.estimate import ServingConfig, operating_point
from pdtrt.perf.factors import EfficiencyFactors
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import kv_link
from pdtrt.perf.point import OperatingPoint
from pdtrt.planner.space import SearchBounds

__all__ = ["EXTRA_DECODE", "ExtraDecode", "extra_label", "mixed_configs", "mixed_point"]

EXTRA_DECODE = 3  # at most this many replicas of the other type

ExtraDecode = tuple[tuple[Instance, int], ...]  # (instance, count) of other GPU types


def extra_label(extra: ExtraDecode) -> str:
    """`` + 2x h100-sxm TP1`` for the label of a configuration with ``extra`` ('' if none)."""
    return "".join(f" + {n}x {inst.label()}" for inst, n in extra)


def mixed_configs(configs: Iterable[ServingConfig], limits: dict[str, int],
                  bounds: SearchBounds, *,
                  same_node: bool) -> Iterator[tuple[ServingConfig, ExtraDecode]]:
    """Mixed decode pools (module doc) from the prefill pools and decode instances of the
    space's disaggregated ``configs`` -- a bounded type's single-type pool may be missing
    from them: too few of its cards is why a mixed pool exists; ``limits`` is the cards a
    plan may use per bounded GPU key."""
    configs = [c for c in configs if c.mode is ServingMode.DISAGGREGATED]
    decodes = {(c.decode.gpu.key, c.decode.tp): c.decode for c in configs if c.decode}
    prefills = {(c.prefill.label(), c.prefill.max_num_tokens, c.prefill_instances):
                (c.prefill, c.prefill_instances) for c in configs}
    for pre, a in prefills.values():
        for (key1, tp), dec1 in decodes.items():
            if key1 not in limits:
                continue
            left = limits[key1] - (pre.num_gpus * a if pre.gpu.key == key1 else 0)
            if left < dec1.num_gpus:
                continue
            base = ServingConfig(mode=ServingMode.DISAGGREGATED, prefill=pre,
                                 prefill_instances=a, decode=dec1,
                                 decode_instances=left // dec1.num_gpus,
                                 link=kv_link(pre.gpu, dec1.gpu, same_node=same_node))
            for (key2, tp2), dec2 in decodes.items():
                if key2 == key1 or tp2 != tp:
                    continue
                for n2 in range(1, EXTRA_DECODE + 1):
                    if bounds.allows(base, ((dec2, n2),)):
                        yield base, ((dec2, n2),)


def mixed_point(config: ServingConfig, extra: ExtraDecode, f: EfficiencyFactors, *, isl: int,
                osl: int, rate_per_s: float, same_node: bool) -> OperatingPoint:
    """The screen's point of a mixed pool: each type's replicas at the share of the requests
    their KV blocks hold (as many replicas of that type as would take the whole rate at that
    share each, to the nearest whole one: the screen is loose, the simulation decides), the
    worse type's point."""
    assert config.decode is not None and config.link is not None
    seq = isl + osl
    pools = [(config.decode, config.decode_instances, config.link)] + [
        (inst, n, kv_link(config.prefill.gpu, inst.gpu, same_node=same_node))
        for inst, n in extra]
    total = sum(n * inst.memory(seq).kv_blocks for inst, n, _ in pools)
    points = []
    for inst, n, link in pools:
        equivalent = max(n, round(total / max(inst.memory(seq).kv_blocks, 1)))
        points.append(operating_point(
            replace(config, decode=inst, decode_instances=equivalent, link=link), f, f,
            isl=isl, osl=osl, rate_per_s=rate_per_s))
    return max(points, key=lambda p: (not p.stable, p.tpot_p90_s))

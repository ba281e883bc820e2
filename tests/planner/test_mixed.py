"""Mixed decode pools in ``pdtrt plan`` (issue 47, item 4): sixteen owned L40S and rented H100s
for Llama-3.1-8B 3000/500 at 32 req/s. With a 50 ms TPOT target an L40S decodes within it, so
the plan keeps eight owned L40S on prefill, puts the other eight on decode and adds one rented
H100 beside them (a mixed pool routed by KV capacity) -- cheaper per SLO-meeting request than
the best single-type decode pool (two rented H100s). With 30 ms an L40S decode step is too
slow: mixed pools are searched, none passes, and a single-type pool wins."""

from __future__ import annotations

import pytest
import yaml

from pdtrt.enums import ServingMode
from pdtrt.planner.mixed import mixed_configs
from pdtrt.planner.request import resolve_request
from pdtrt.planner.search import plan
from pdtrt.planner.space import SearchBounds
from pdtrt.planner.spec_writer import write_spec
from pdtrt.sim.scheduling import RoutingPolicy

M8B = "meta-llama/Meta-Llama-3.1-8B"


def _plan(itl_ms: float, num_requests: int):
    return plan(resolve_request(
        model_ref=M8B, gpus="h100-sxm", isl=3000, osl=500, rate_per_s=32.0, ttft_p90_ms=1000,
        itl_p90_ms=itl_ms, have="l40s:16", power_price=0.15, max_gpus="h100-sxm:8,l40s:16",
        num_requests=num_requests))


@pytest.fixture(scope="module")
def pays():
    return _plan(50, 300)  # goodput needs a steady state: 300 requests, not the tail of 80


def test_a_mixed_pool_is_proposed_and_beats_every_single_type_pool(pays):
    chosen = pays.chosen
    assert chosen is not None and chosen.meets_slo
    assert [(i.gpu.key, n) for i, n in chosen.extra_decode] == [("h100-sxm", 1)]
    assert (chosen.config.decode.gpu.key, chosen.config.decode_instances) == ("l40s", 8)
    pure = next(c for c in pays.ranked
                if c.config.mode is ServingMode.DISAGGREGATED and not c.extra_decode)
    assert chosen.goodput_per_usd_hour > pure.goodput_per_usd_hour
    assert chosen.usd_per_mtok() < pure.usd_per_mtok()
    s = pays.mixed_summary()
    assert s["mixed_pays"] is True and s["mixed"]["config"] == chosen.label()
    assert s["single_type"]["config"] == pure.label()
    assert pays.to_dict()["mixed_decode"] == s
    assert pays.to_dict()["chosen"]["mixed_decode"] == [
        {"gpu": "h100-sxm", "tp": 1, "instances": 1}]
    # the owned L40S cost power, the H100 rent: both decode types are in the fleet's pools
    assert {(p.phase, p.gpu) for p in chosen.fleet_use.pools} == {
        ("prefill", "l40s"), ("decode", "l40s"), ("decode", "h100-sxm")}
    assert chosen.fleet_use.owned == 16


def test_a_mixed_pool_is_simulated_routed_by_kv_capacity(pays):
    from pdtrt.planner.search import _sim_config

    c = pays.chosen
    sim = _sim_config(pays.request, c.config, c.extra_decode)
    assert sim.extra_decode == c.extra_decode
    assert sim.decode_routing is RoutingPolicy.KV_CAPACITY


def test_the_written_spec_describes_the_mixed_pool_and_validates(pays, tmp_path):
    from pdtrt.spec.load import load_deployment

    out = tmp_path / "pdtrt.yaml"
    cand = write_spec(pays, out)  # validates it as a spec
    assert cand is pays.chosen
    data = yaml.safe_load(out.read_text())
    assert data["router"]["routing"] == "kv_capacity"
    assert data["decode"]["gpu"] == "l40s"
    assert data["decode"]["endpoints"] == [
        {"url": "decode-l40s-host:8001", "instances": 8},
        {"url": "decode-h100-sxm-host:8001", "instances": 1, "gpu": "h100-sxm"}]
    dep = load_deployment(out, catalog=pays.request.catalog)
    assert dep.spec.decode.instances_by_gpu() == {"l40s": 8, "h100-sxm": 1}
    # `pdtrt simulate` reads kv_capacity as the decode pool's routing (it was a KeyError)
    from pdtrt.sim.from_spec import SimOverrides, sim_configs

    (sim,) = sim_configs(dep, SimOverrides(modes=(ServingMode.DISAGGREGATED,)))
    assert sim.decode_routing is RoutingPolicy.KV_CAPACITY
    assert data["decode"]["price_per_hour_usd"] == round(
        cand.fleet_use.usd_per_gpu_hour("decode"), 4)
    assert "a mixed decode pool, routed by KV capacity" in out.read_text()


def test_a_single_type_pool_wins_when_the_small_cards_are_too_slow():
    p = _plan(30, 80)
    mixed = [c for c in p.candidates if c.extra_decode]
    assert mixed and not any(c.meets_slo for c in mixed)  # searched, none meets the SLO
    assert p.chosen is not None and not p.chosen.extra_decode
    assert p.mixed_summary()["mixed"] is None and p.mixed_summary()["mixed_pays"] is None


def test_only_bounded_types_get_a_mixed_pool(catalog):
    from pdtrt.enums import KVDType, WeightQuant
    from pdtrt.facts.model import load_model_facts
    from pdtrt.perf.factors import load_factors
    from pdtrt.planner.space import candidate_configs

    gpus = (catalog.get("l40s"), catalog.get("h100-sxm"))
    configs = list(candidate_configs(
        load_model_facts(M8B), gpus, load_factors(), isl=3000, osl=500, rate_per_s=8.0,
        weights=WeightQuant.NONE, kv_dtype=KVDType.FP8, bounds=SearchBounds()))
    assert not list(mixed_configs(configs, {}, SearchBounds(), same_node=False))
    bounds = SearchBounds(max_gpus_per_type={"l40s": 4})
    mixed = list(mixed_configs(configs, {"l40s": 4}, bounds, same_node=False))
    assert mixed and all(c.decode.gpu.key == "l40s" and extra[0][0].gpu.key == "h100-sxm"
                         and extra[0][0].tp == c.decode.tp and bounds.allows(c, extra)
                         for c, extra in mixed)
    assert max(n for _, ((_, n),) in mixed) == 3

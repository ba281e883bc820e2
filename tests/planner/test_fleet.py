"""Owned cards: parsing --have / --max-gpus, which cards a configuration uses, what it costs,
and a plan that starts from them (its spec, its cost with and without them)."""

from __future__ import annotations

import pytest

from pdtrt.enums import ServingMode
from pdtrt.errors import CatalogError, PdtrtError
from pdtrt.perf.estimate import ServingConfig
from pdtrt.perf.hardware import Instance
from pdtrt.perf.link import kv_link
from pdtrt.planner.fleet import Fleet, parse_counts
from pdtrt.planner.request import resolve_request
from pdtrt.planner.search import plan
from pdtrt.planner.space import SearchBounds
from pdtrt.planner.spec_writer import spec_text

M8B = "meta-llama/Meta-Llama-3.1-8B"


@pytest.fixture(scope="module")
def llama8b():
    from pdtrt.facts.model import load_model_facts

    return load_model_facts(M8B)


def test_parse_counts_folds_aliases(catalog):
    assert parse_counts("l40s:8, h100:2", catalog, flag="--have") == {"l40s": 8, "h100-sxm": 2}


@pytest.mark.parametrize(("text", "error", "match"), [
    ("l40s", PdtrtError, "'l40s' is not TYPE:COUNT"),
    ("l40s:x", PdtrtError, "count of 'l40s' must be a whole number, got 'x'"),
    ("l40s:0", PdtrtError, "count of 'l40s' must be at least 1, got 0"),
    ("l40s:2,l40-s:3", PdtrtError, "l40s is named twice"),
    ("l40:2", CatalogError, "did you mean"),
    (" , ", PdtrtError, "--have names no GPU"),
], ids=["no-count", "not-a-number", "zero", "twice", "unknown", "empty"])
def test_parse_counts_errors(catalog, text, error, match):
    with pytest.raises(error, match=match):
        parse_counts(text, catalog, flag="--have")


def _disagg(model, catalog, pre_gpu, a, dec_gpu, b):
    pre = Instance(model=model, gpu=catalog.get(pre_gpu), tp=1)
    dec = Instance(model=model, gpu=catalog.get(dec_gpu), tp=1)
    return ServingConfig(mode=ServingMode.DISAGGREGATED, prefill=pre, prefill_instances=a,
                         decode=dec, decode_instances=b, link=kv_link(pre.gpu, dec.gpu))


def test_owned_cards_cost_power_and_the_rest_is_rented(llama8b, catalog):
    fleet = Fleet(owned={"l40s": 8, "h100-sxm": 2}, power_price_usd_per_kwh=0.2)
    use = fleet.use(_disagg(llama8b, catalog, "h100-sxm", 3, "l40s", 6))
    pre, dec = use.pool("prefill"), use.pool("decode")
    assert (pre.owned, pre.rented, dec.owned, dec.rented) == (2, 1, 6, 0)
    h100, l40s = catalog.get("h100-sxm"), catalog.get("l40s")
    assert pre.usd_per_hour == pytest.approx(2 * 0.700 * 0.2 + h100.price_per_hour_usd)
    assert dec.usd_per_hour == pytest.approx(6 * 0.350 * 0.2)
    assert use.cost_per_hour_usd == pytest.approx(pre.usd_per_hour + dec.usd_per_hour)
    assert use.describe() == ("prefill 3x h100-sxm (2 owned + 1 rented); "
                              "decode 6x l40s (6 owned)")
    assert use.cost_per_hour_usd < 3 * h100.price_per_hour_usd + 6 * l40s.price_per_hour_usd


def test_owned_cards_of_one_type_are_shared_between_phases(llama8b, catalog):
    use = Fleet(owned={"l40s": 5}, power_price_usd_per_kwh=0.1).use(
        _disagg(llama8b, catalog, "l40s", 2, "l40s", 4))
    assert (use.pool("decode").owned, use.pool("prefill").owned) == (4, 1)
    assert use.owned == 5 and use.pool("prefill").rented == 1


def test_an_aggregated_pool_says_so(llama8b, catalog):
    config = ServingConfig(mode=ServingMode.AGGREGATED, prefill_instances=3,
                           prefill=Instance(model=llama8b, gpu=catalog.get("l40s"), tp=2))
    use = Fleet(owned={"l40s": 4}, power_price_usd_per_kwh=0.1).use(config)
    assert use.describe() == "aggregated 6x l40s (4 owned + 2 rented)"


def test_per_type_caps_bound_the_search(llama8b, catalog):
    bounds = SearchBounds(max_gpus_per_type={"h100-sxm": 2})
    assert bounds.allows(_disagg(llama8b, catalog, "h100-sxm", 2, "l40s", 9))
    assert not bounds.allows(_disagg(llama8b, catalog, "h100-sxm", 1, "h100-sxm", 2))


ARGS = {"model_ref": M8B, "gpus": None, "isl": 100, "osl": 10, "rate_per_s": 1.0,
        "ttft_p90_ms": 500, "itl_p90_ms": 50}


def test_resolve_request_with_owned_cards():
    req = resolve_request(**{**ARGS, "gpus": "h100-sxm"}, have="l40s:8", power_price=0.15,
                          max_gpus="h100-sxm:4,l40s:8")
    assert [g.key for g in req.gpus] == ["l40s", "h100-sxm"]  # owned first, then rentable
    assert req.fleet == Fleet(owned={"l40s": 8}, power_price_usd_per_kwh=0.15)
    assert req.bounds == SearchBounds(max_gpus_per_type={"h100-sxm": 4, "l40s": 8})
    assert resolve_request(**ARGS, have="l40s:1", power_price=0.1,
                           max_gpus="6").bounds.max_gpus == 6


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"have": "l40s:8"}, "--have needs --power-price"),
    ({"have": "l40s:8", "power_price": -1.0}, "--power-price must be >= 0"),
    ({"gpus": "l40s", "power_price": 0.1}, "give them with --have"),
    ({"have": "cpu:1", "power_price": 0.1}, "no board power for it"),
    ({"have": "l40s:8", "power_price": 0.1, "budget_usd_per_hour": 9.0}, "with --have give"),
    ({"gpus": "l40s", "max_gpus": "many"}, "--max-gpus must be a count or TYPE:COUNT"),
    ({"gpus": "l40s", "max_gpus": "0"}, "--max-gpus must be at least 1"),
    ({"gpus": "l40s", "max_gpus": "l40s:0"}, "count of 'l40s' must be at least 1"),
    ({}, "--gpus names no GPU"),
], ids=["no-power-price", "negative-power", "power-without-have", "no-tdp", "budget",
        "max-gpus-word", "max-gpus-zero", "max-gpus-type-zero", "nothing"])
def test_resolve_request_fleet_errors(kwargs, match):
    with pytest.raises(PdtrtError, match=match):
        resolve_request(**{**ARGS, **kwargs})


@pytest.fixture(scope="module")
def owned_plan():
    req = resolve_request(model_ref=M8B, gpus="h100-sxm", isl=3000, osl=500, rate_per_s=2.0,
                          ttft_p90_ms=1000, itl_p90_ms=30, have="l40s:4", power_price=0.15,
                          max_gpus="h100-sxm:2,l40s:4", num_requests=80)
    return plan(req)


def test_plan_uses_the_owned_cards_and_states_both_costs(owned_plan):
    chosen = owned_plan.chosen
    assert chosen is not None and chosen.fleet_use is not None
    assert chosen.fleet_use.owned > 0  # owned L40S cost power only: the plan takes them
    assert chosen.cost_per_hour_usd < chosen.rent_per_hour_usd
    summary = owned_plan.owned_summary()
    assert summary["rented_config"] == owned_plan.without_owned.chosen.config.label()
    assert summary["usd_per_mtok"] < summary["rented_usd_per_mtok"]
    assert owned_plan.without_owned.request.fleet is None
    assert owned_plan.to_dict()["owned"] == summary
    assert all(c["fleet"]["cost_per_hour_usd"] == c["cost_per_hour_usd"]
               for c in owned_plan.to_dict()["ranked"])


def test_written_spec_prices_pools_at_their_blended_gpu_hour(owned_plan):
    import yaml

    if owned_plan.best(ServingMode.DISAGGREGATED) is None:
        pytest.skip("no disaggregated configuration met the SLOs")
    cand = owned_plan.best(ServingMode.DISAGGREGATED)
    text = spec_text(owned_plan, model_name=M8B)
    spec = yaml.safe_load(text)
    for phase in ("prefill", "decode"):
        pool = cand.fleet_use.pool(phase)
        assert spec[phase]["price_per_hour_usd"] == round(pool.usd_per_gpu_hour, 4)
    assert f"# owned and rented cards: {cand.fleet_use.describe()}" in text

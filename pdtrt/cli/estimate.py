"""``pdtrt estimate``: TTFT, TPOT, throughput and memory of one fixed configuration."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from pdtrt.cli.render import emit_json, gib, json_option
from pdtrt.enums import KVDType, ServingBackend, ServingMode, WeightQuant
from pdtrt.errors import PdtrtError
from pdtrt.facts.catalog import load_catalog, load_prices
from pdtrt.facts.model import load_model_facts
from pdtrt.perf.configs import make_instance
from pdtrt.perf.estimate import Estimate, Load, ServingConfig, estimate
from pdtrt.perf.factors import load_factors
from pdtrt.perf.link import kv_link
from pdtrt.perf.scheduling import CapacityPolicy

WEIGHTS = {"bf16": WeightQuant.NONE, "fp8": WeightQuant.FP8}
KV = {"bf16": KVDType.BF16, "fp8": KVDType.FP8}


def _ms(value: float | None) -> str:
    return "unstable" if value is None else f"{value:.1f} ms"


def _lines(est: Estimate) -> list[str]:
    d = est.to_dict()
    load = (f"{est.load.concurrency} concurrent clients" if est.load.concurrency
            else f"{est.load.rate_per_s:g} req/s")
    lines = [f"{d['config']}  (ISL {est.load.isl}, OSL {est.load.osl}, {load})"]
    if not d["stable"]:
        lines.append(f"  UNSTABLE: {d['bottleneck']} -- the configuration cannot sustain this "
                     "load")
    if est.load.concurrency and est.burst > 1:
        lines.append(f"  clients arrive in bursts of {est.burst:g} (closed-loop benchmark; "
                     "--burst 1 for independent clients)")
    client = ""
    if d["client_overhead_ms"] and d["ttft_ms"] is not None:
        client = (f"   (engine {_ms(d['engine_ttft_ms'])} + client overhead "
                  f"{d['client_overhead_ms']:.1f} ms)")
    lines += [
        f"  TTFT  mean {_ms(d['ttft_ms'])}   p90 {_ms(d['ttft_p90_ms'])}{client}",
        f"  TPOT  mean {_ms(d['tpot_ms'])}   p90 {_ms(d['tpot_p90_ms'])}   "
        f"(ITL p90 {_ms(d['itl_p90_ms'])})",
        f"  throughput {d['output_tok_per_s']:.0f} output tok/s, {d['req_per_s']:.3f} req/s",
        f"  decode batch per instance {d['decode_batch_per_instance']} "
        f"(max {d['max_decode_batch']}); prefill {_ms(d['prefill_ms'])} alone, "
        f"{d['prompts_per_step']} prompts per prompt step; decode step "
        f"{_ms(d['decode_step_ms'])}" + (f", KV transfer {_ms(d['kv_transfer_ms'])}"
                                         if est.config.link else ""),
        f"  bottleneck: {d['bottleneck']}; utilisation prefill {d['utilisation']['prefill']:.0%}"
        f", decode {d['utilisation']['decode']:.0%}",
    ]
    for phase, mem in est.memory.items():
        lines.append(f"  memory per GPU ({phase}): weights {gib(mem.weight_bytes)}, KV "
                     f"{gib(mem.kv_budget_bytes)} -> {mem.max_concurrent_seqs} sequences of "
                     f"{mem.seq_len} tokens")
    usd = d["usd_per_mtok"]
    lines.append(f"  cost: {d['num_gpus']} GPUs, ${d['cost_per_hour_usd']:.2f}/h"
                 + (f", ${usd:.3f} per million output tokens" if usd is not None else ""))
    lines += [f"  limit: {x}" for x in est.limits]
    band = est.error_band
    if band is not None:
        lines.append(f"  expected error (held-out, {band.regime}): TTFT ±{band.ttft_mape:.0%}, "
                     f"TPOT ±{band.tpot_mape:.0%} mean; worst {band.max_ratio:.1f}x")
        if band.caveat:
            lines.append(f"    ({band.caveat})")
    lines += [f"  note: {n}" for n in est.notes]
    return lines


@click.command("estimate")
@click.option("--model", "model_ref", required=True,
              help="HF config.json, checkpoint dir or built-in model name.")
@click.option("--gpu", required=True, help="GPU of the (prefill) instances, e.g. h100-sxm.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True,
              help="Tensor parallelism of the (prefill) instances.")
@click.option("--concurrency", type=click.IntRange(min=1), help="Closed loop: clients.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True),
              help="Open loop: requests per second.")
@click.option("--isl", type=click.IntRange(min=1), required=True, help="Prompt tokens.")
@click.option("--osl", type=click.IntRange(min=1), required=True, help="Output tokens.")
@click.option("--weights", type=click.Choice(list(WEIGHTS)), default="bf16", show_default=True,
              help="Weight precision of the linear layers.")
@click.option("--kv-dtype", type=click.Choice(list(KV)), default="bf16", show_default=True,
              help="KV-cache dtype.")
@click.option("--mode", type=click.Choice([m.value for m in ServingMode]),
              default="aggregated", show_default=True)
@click.option("--decode-gpu", help="Disaggregated: GPU of the decode instances.")
@click.option("--decode-tp", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--prefill-instances", type=click.IntRange(min=1), default=1, show_default=True,
              help="Instances of the prefill pool (aggregated: of the one pool).")
@click.option("--decode-instances", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--max-batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Engine max_batch_size of the aggregated/decode instances.")
@click.option("--max-num-tokens", type=click.IntRange(min=1), default=8192, show_default=True,
              help="Engine max_num_tokens (prefill chunk budget per step).")
@click.option("--same-node", is_flag=True,
              help="Disaggregated: both pools in one node (NVLink between equal GPUs).")
@click.option("--backend", type=click.Choice([b.value for b in ServingBackend]),
              default="trtllm", show_default=True, help="Whose calibrated factors to use.")
@click.option("--factors", "factors_file", type=click.Path(path_type=Path, exists=True),
              help="A factors file written by scripts/calibrate.py.")
@click.option("--prices", type=click.Path(path_type=Path), help="YAML {gpu: usd_per_hour}.")
@click.option("--capacity-policy", type=click.Choice([p.value for p in CapacityPolicy]),
              default=CapacityPolicy.GUARANTEED_NO_EVICT.value, show_default=True,
              help="TensorRT-LLM capacity scheduler: what KV admission reserves.")
@click.option("--burst", type=click.FloatRange(min=1),
              help="Prompts that reach the engine together [default: 1 open loop, the "
                   "calibrated closed-loop burst with --concurrency].")
@click.option("--client-overhead-ms", type=click.FloatRange(min=0), default=0.0,
              show_default=True,
              help="Client/HTTP overhead of your harness, added to TTFT and shown apart.")
@json_option
def estimate_cmd(model_ref: str, gpu: str, tp: int, concurrency: int | None,
                 rate: float | None, isl: int, osl: int, weights: str, kv_dtype: str,
                 mode: str, decode_gpu: str | None, decode_tp: int, prefill_instances: int,
                 decode_instances: int, max_batch_size: int, max_num_tokens: int,
                 same_node: bool, backend: str, factors_file: Path | None,
                 prices: Path | None, capacity_policy: str, burst: float | None,
                 client_overhead_ms: float, as_json: bool) -> None:
    """Estimate one fixed configuration: TTFT and TPOT (mean, p90), throughput, memory, cost.

    Closed loop (--concurrency) or open loop (--rate). The model accounts for queueing and,
    in aggregated serving, for prefills interrupting decode steps. Step times come from
    kernel-measured efficiencies of each GPU and dtype; the output names what limits the
    configuration (KV-, batch- or queue-bound), the error measured in the nearest validated
    regime, and any efficiency borrowed from another GPU or dtype.

    \b
    Example:
      pdtrt estimate --model meta-llama/Meta-Llama-3.1-8B --gpu h100-sxm --rate 4 \\
        --isl 3000 --osl 500 --mode disaggregated --decode-gpu l40s --decode-instances 2
    """
    if (concurrency is None) == (rate is None):
        raise click.UsageError("give exactly one of --concurrency or --rate")
    catalog = load_catalog(load_prices(prices) if prices else None)
    model = load_model_facts(model_ref)
    f = load_factors(ServingBackend(backend), factors_file)
    f = replace(f, request_overhead_s=client_overhead_ms / 1e3)
    serving_mode = ServingMode(mode)
    common = dict(weights=WEIGHTS[weights], kv_dtype=KV[kv_dtype])
    if serving_mode is ServingMode.AGGREGATED:
        inst = make_instance(model, catalog.get(gpu), tp=tp, max_batch_size=max_batch_size,
                             max_num_tokens=max_num_tokens, **common)
        config = ServingConfig(mode=serving_mode, prefill=inst,
                               prefill_instances=prefill_instances)
    else:
        if decode_gpu is None:
            raise PdtrtError("--mode disaggregated needs --decode-gpu",
                             hint="e.g. --decode-gpu l40s --decode-instances 2")
        pre = make_instance(model, catalog.get(gpu), tp=tp, max_batch_size=8,
                            max_num_tokens=max_num_tokens, **common)
        dec = make_instance(model, catalog.get(decode_gpu), tp=decode_tp,
                            max_batch_size=max_batch_size, max_num_tokens=max_num_tokens,
                            **common)
        config = ServingConfig(mode=serving_mode, prefill=pre,
                               prefill_instances=prefill_instances, decode=dec,
                               decode_instances=decode_instances,
                               link=kv_link(pre.gpu, dec.gpu, same_node=same_node))
    policy = CapacityPolicy(capacity_policy)
    config = replace(config, prefill=replace(config.prefill, capacity_policy=policy),
                     decode=config.decode and replace(config.decode, capacity_policy=policy))
    est = estimate(config, Load(isl=isl, osl=osl, rate_per_s=rate, concurrency=concurrency,
                                burst=burst), f)
    if as_json:
        emit_json(est.to_dict())
    else:
        click.echo("\n".join(_lines(est)))

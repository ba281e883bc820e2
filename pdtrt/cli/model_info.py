"""``pdtrt model-info``: parameters, weight and KV bytes, FLOPs, memory fit per GPU."""

from __future__ import annotations

import click

from pdtrt.cli.render import count, emit_json, gib, json_option
from pdtrt.enums import DType, KVDType, WeightQuant
from pdtrt.facts.catalog import load_catalog
from pdtrt.facts.model import builtin_model_names, load_model_facts
from pdtrt.facts.report import ModelReport, model_report


def _lines(report: ModelReport) -> list[str]:
    m = report.model
    lines = [
        f"model: {m.name} ({m.model_type}, {m.num_layers} layers, hidden {m.hidden_size}, "
        f"{m.num_heads} heads / {m.num_kv_heads} KV heads, head dim {m.head_dim})",
        f"parameters: {count(m.num_params)}",
        f"weight bytes ({report.dtype}, weights {report.weights}): "
        f"{count(report.weight_bytes)} ({gib(report.weight_bytes)})",
        f"KV bytes per token ({report.kv_dtype}, TP1): {count(report.kv_bytes_per_token)}",
        f"prefill FLOPs per token at ISL {report.isl}: {report.prefill_flops_per_token:.4g}",
        f"decode FLOPs per token at context {report.isl + report.osl // 2}: "
        f"{report.decode_flops_per_token:.4g}",
        f"valid TP: {', '.join(map(str, m.valid_tps()))}",
    ]
    for fit in report.fits:
        lines += [
            f"memory fit on {fit.gpu} at TP{fit.tp} (ISL {report.isl} + OSL {report.osl} = "
            f"{fit.seq_len} tokens per sequence):",
            f"  weights per GPU: {count(fit.weight_bytes)} ({gib(fit.weight_bytes)})",
            f"  KV bytes per token per rank: {count(fit.kv_bytes_per_token)}",
            f"  KV budget: {gib(fit.kv_budget_bytes)} = {count(fit.kv_blocks)} blocks of "
            f"{fit.tokens_per_block} tokens",
            f"  max concurrent sequences: {count(fit.max_concurrent_seqs)}",
            f"  arithmetic: {fit.explain()}",
        ]
    return lines


@click.command("model-info")
@click.argument("model", required=False)
@click.option("--gpu", "gpu_names", multiple=True,
              help="GPU to fit the model on (repeatable), e.g. --gpu h100-sxm --gpu l40s.")
@click.option("--tp", type=click.IntRange(min=1),
              help="Tensor parallelism; default: the smallest valid TP that fits.")
@click.option("--isl", type=click.IntRange(min=1), default=2048, show_default=True,
              help="Input (prompt) tokens per sequence.")
@click.option("--osl", type=click.IntRange(min=1), default=512, show_default=True,
              help="Output tokens per sequence.")
@click.option("--dtype", type=click.Choice([d.value for d in DType]), default="bf16",
              show_default=True, help="Model dtype.")
@click.option("--weights", type=click.Choice([w.value for w in WeightQuant]), default="none",
              show_default=True, help="Weight quantisation of the linear layers.")
@click.option("--kv-dtype", type=click.Choice([k.value for k in KVDType]), default="bf16",
              show_default=True, help="KV-cache dtype.")
@click.option("--max-num-tokens", type=click.IntRange(min=1), default=8192, show_default=True,
              help="Tokens per engine step (sizes the activation reserve).")
@click.option("--tokens-per-block", type=click.IntRange(min=1), default=32, show_default=True)
@click.option("--kv-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.9, show_default=True, help="kv_cache_free_gpu_mem_fraction.")
@click.option("--list", "list_builtin", is_flag=True, help="List the built-in model configs.")
@json_option
def model_info(model: str | None, gpu_names: tuple[str, ...], tp: int | None, isl: int,
               osl: int, dtype: str, weights: str, kv_dtype: str, max_num_tokens: int,
               tokens_per_block: int, kv_fraction: float, list_builtin: bool,
               as_json: bool) -> None:
    """Facts of MODEL -- a Hugging Face config.json, a checkpoint directory, or a built-in name.

    Prints parameters, weight bytes, KV bytes per token (GQA-aware), FLOPs per token of each
    phase and, for each --gpu, the memory fit: weights + runtime + activations + KV budget ->
    maximum concurrent sequences of ISL + OSL tokens.

    \b
    Example:
      pdtrt model-info meta-llama/Meta-Llama-3.1-8B --gpu h100-sxm --gpu l40s --isl 3000 --osl 500
    """
    if list_builtin:
        names = builtin_model_names()
        if as_json:
            emit_json(names)
        else:
            click.echo("\n".join(names))
        return
    if model is None:
        raise click.UsageError("give MODEL (a config.json, a checkpoint dir or a built-in name; "
                               "see --list)")
    catalog = load_catalog()
    report = model_report(
        load_model_facts(model), [catalog.get(n) for n in gpu_names], tp=tp, isl=isl, osl=osl,
        dtype=DType(dtype), weights=WeightQuant(weights), kv_dtype=KVDType(kv_dtype),
        max_num_tokens=max_num_tokens, tokens_per_block=tokens_per_block,
        kv_cache_fraction=kv_fraction,
    )
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo("\n".join(_lines(report)))

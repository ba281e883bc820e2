"""``pdtrt infer PROMPT``: one generation request, text printed as it arrives, then timings."""

from __future__ import annotations

import click

from pdtrt.cli.render import emit_json, json_option
from pdtrt.client import Chunk, GenerateRequest, GenerateResult, LLMClient

DEFAULT_URL = "127.0.0.1:8001"


def url_option(f):
    return click.option("--url", default=DEFAULT_URL, show_default=True, metavar="HOST:PORT",
                        help="gRPC address of the Triton server.")(f)


def timing_line(result: GenerateResult) -> str:
    ttft = "-" if result.ttft_s is None else f"{result.ttft_s * 1e3:.1f} ms"
    parts = [f"TTFT {ttft}"]
    itls = result.itls_s
    if itls:
        mean_ms = sum(itls) / len(itls) * 1e3
        parts.append(f"ITL mean {mean_ms:.1f} ms, max {max(itls) * 1e3:.1f} ms")
    parts.append(f"{result.num_chunks} responses" + (
        f" ({result.num_tokens} tokens)" if result.num_tokens != result.num_chunks else ""))
    parts.append(f"E2E {result.e2e_s * 1e3:.1f} ms")
    return ", ".join(parts)


@click.command("infer")
@click.argument("prompt")
@url_option
@click.option("--model", default="ensemble", show_default=True,
              help="Model speaking the TensorRT-LLM ensemble I/O.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=64, show_default=True,
              help="Output tokens to generate.")
@click.option("--stream/--no-stream", default=True, show_default=True,
              help="Stream tokens (one response each) or get the whole text at once.")
@click.option("--temperature", type=float, help="Sampling temperature (model default if unset).")
@click.option("--top-k", type=click.IntRange(min=0), help="Top-k sampling.")
@click.option("--top-p", type=click.FloatRange(min=0.0, max=1.0), help="Top-p sampling.")
@click.option("--seed", type=click.IntRange(min=0), help="Random seed of the sampler.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.0, min_open=True),
              default=60.0, show_default=True, help="Seconds to wait for the final response.")
@json_option
def infer(prompt: str, url: str, model: str, max_tokens: int, stream: bool,
          temperature: float | None, top_k: int | None, top_p: float | None, seed: int | None,
          timeout_s: float, as_json: bool) -> None:
    """Send PROMPT to the server and print the reply as it arrives, then TTFT and ITL.

    TTFT is send to first response; ITL the gaps between consecutive responses (one token
    each when streaming), as seen by this client.
    """
    request = GenerateRequest(prompt=prompt, max_tokens=max_tokens, stream=stream,
                              temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)

    def show(chunk: Chunk) -> None:
        click.echo(chunk.text, nl=False)

    with LLMClient(url) as client:
        result = client.generate(request, model=model, timeout_s=timeout_s,
                                 on_chunk=None if as_json else show)
    if not as_json and result.chunks:
        click.echo()
    result.raise_for_error()
    if as_json:
        emit_json(result.to_dict())
        return
    click.echo(timing_line(result), err=False)

"""A context-only (prefill) reference LLM in its own process, driven over a multiprocessing pipe:
the other side of a real UCX KV transfer for tests/llmapi/test_reference_llm.py."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# TRTLLMSampler: the tests hold the sampling rules to the C++ decoder's (LlmArgs' default,
# auto, is 1.2's TorchSampler, which ignores penalties and bad words: test_sampler_type.py)
OPTIONS = {"enable_iter_perf_stats": True, "max_batch_size": 4, "max_num_tokens": 64,
           "max_seq_len": 64, "kv_cache_config": {"tokens_per_block": 16},
           "disable_overlap_scheduler": True,  # TensorRT-LLM 1.2 refuses context-only otherwise
           "sampler_type": "TRTLLMSampler",
           "cache_transceiver_config": {"backend": "UCX", "kv_transfer_timeout_ms": 10_000}}


def context_process(conn, model_dir: str) -> None:
    from pdtrt.llmapi.reference import LLM, DisaggregatedParams, SamplingParams

    llm = LLM(model_dir, skip_tokenizer_init=True, **OPTIONS)
    conn.send("ready")

    async def context(prompt: list[int], sampling: dict):
        ids = {n: sampling.pop(n) for n in ("_stop_word_ids", "_bad_word_ids") if n in sampling}
        params = SamplingParams(**{"max_tokens": 1, "end_id": -1, **sampling})
        for name, value in ids.items():  # init=False fields: set after construction
            setattr(params, name, value)
        result = llm.generate_async(prompt, params, disaggregated_params=DisaggregatedParams(
            request_type="context_only"))
        return await result.aresult()

    while True:
        cmd, arg = conn.recv()
        if cmd == "context":  # arg: the prompt, or (prompt, SamplingParams keyword arguments)
            prompt, sampling = arg if isinstance(arg, tuple) else (arg, {})
            result = asyncio.run(context(prompt, dict(sampling)))
            out = result.outputs[0]
            params = out.disaggregated_params
            conn.send({"token_ids": out.token_ids, "finish_reason": out.finish_reason,
                       "logprobs": out.logprobs,
                       "first_gen_tokens": params.first_gen_tokens,
                       "ctx_request_id": params.ctx_request_id,
                       "opaque_state": params.opaque_state, "draft_tokens": params.draft_tokens})
        elif cmd == "stats":
            conn.send(llm._pdtrt_kv_transfer_stats())
        elif cmd == "stop":
            llm.shutdown()
            conn.send(None)
            return


@contextmanager
def running_context_peer(model_dir: str, *, ready_s: float = 120,
                         reply_s: float = 60) -> Iterator[Callable]:
    """A :func:`context_process` in a spawned process: ``call(cmd, arg=None)`` -> its reply."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=context_process, args=(child, model_dir), daemon=True)
    proc.start()
    assert parent.poll(ready_s) and parent.recv() == "ready"

    def call(cmd, arg=None):
        parent.send((cmd, arg))
        assert parent.poll(reply_s)
        return parent.recv()

    yield call
    call("stop")
    proc.join(10)

"""The reference ``LLM``: TensorRT-LLM's LLM-API engine class over pdtrt's CPU reference engine.

Exactly the pinned surface (``pdtrt/data/targets/trtllm-1.2-llmapi.yaml``): the constructor of
``tensorrt_llm/llmapi/llm.py`` (commit 4c05a74891e4df8066f08ed4ce14b0972abe4e25) with the
LLM-API options as keyword arguments (checked like ``LlmArgs``: :mod:`.options`),
``generate_async``, ``get_stats``, ``get_kv_cache_events`` and ``shutdown``. Inside, the
in-flight :class:`~pdtrt.llmapi.reference.scheduler.Scheduler` runs the
:class:`~pdtrt.llmapi.reference.engine.ReferenceEngine`, and a streaming request's scheduler
emissions become response steps of its :class:`~.outputs.RequestOutput` as upstream's
``stream_interval`` says (:func:`stream_due`: the first token, every N-th iteration after, the
last; a step carries every token since the one before); a non-streaming request gets one.

Disaggregation as upstream (same file and commit, ``generate_async``; ``executor/result.py``
at a678b91a; ``executor/base_worker.py`` ``abort_request``): with ``cache_transceiver_config``
set, a ``context_only`` request has its ``max_tokens`` forced to 1 (the PyTorch flow's rule),
runs the prompt and returns one token with finish reason "length" and
``outputs[0].disaggregated_params`` (request_type context_only, ``first_gen_tokens``,
``ctx_request_id``, ``opaque_state``) while the :class:`~.transceiver.KVCacheTransceiver` holds
its KV -- until a generation worker pulls it or ``kv_transfer_timeout_ms`` runs out, and only
then: ``abort()`` of the finished request frees nothing. If that first token is the end id, the
request ends "stop", hands back the caller's params and holds no KV (upstream's disaggregated
server then skips the generation request). A first token that completes a stop word still ends
it "length" with its KV held: the sampler checks the length before the stop words
(:func:`.batch_policy._accept` cites it). A ``generation_only`` request with those params pulls
the KV over UCX, then continues from the first token (its output repeats it, as TensorRT-LLM's
generation-only output covers the whole generation); like upstream's generation worker it does
not check that first token against the stop words, so it decodes past one the first token
completed -- pdtrt's router sends no such request (docs/design/serve.md). Without the config,
disaggregated request types are refused, like the PyTorch flow's disabled transceiver.
``get_stats`` follows upstream too: empty without ``enable_iter_perf_stats`` and before the
first request. So does the sampler: ``sampler_type`` as upstream (``auto``, the default, is
TorchSampler at beam width 1), and with TorchSampler 1.2's rules -- no penalties or bad words,
one generator for all draws, the prompt counted toward ``min_tokens`` (:func:`_sampling`).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pdtrt.engine_io import RequestType
from pdtrt.llmapi.reference.engine import (
    ReferenceEngine,
    SequenceSampling,
    TokenLogprobs,
    load_reference_engine,
)
from pdtrt.llmapi.reference.options import ReferenceLlmArgs
from pdtrt.llmapi.reference.outputs import (
    ExecutorResponse,
    Logprob,
    PerfMarks,
    RequestOutput,
    steady_now,
)
from pdtrt.llmapi.reference.params import DisaggregatedParams, SamplingParams, unsupported
from pdtrt.llmapi.reference.prefix_cache import BlockReuseStats, PrefixCache
from pdtrt.llmapi.reference.scheduler import TORCH_SAMPLER_SEED, Emission, Scheduler, SeqRequest
from pdtrt.llmapi.reference.transceiver import KVCacheTransceiver

__all__ = ["LLM", "stream_due"]

log = logging.getLogger(__name__)

# The refusal of TensorRT-LLM 1.2's PyTorch worker for a context-only request while the overlap
# scheduler is on and a cache transceiver is set (tensorrt_llm/executor/base_worker.py
# _enqueue_request; removed on main by PR #12816, April 2026, after 1.2.1)
_OVERLAP_REFUSAL = ("Context only requests are not supported in pytorch backend when overlap "
                    "is enabled.")


class LLM:
    def __init__(self, model: str | Path, tokenizer: Any = None, tokenizer_mode: str = "auto",
                 skip_tokenizer_init: bool = False, trust_remote_code: bool = False,
                 tensor_parallel_size: int = 1, dtype: str = "auto", revision: str | None = None,
                 tokenizer_revision: str | None = None, **kwargs: Any) -> None:
        if tensor_parallel_size != 1 or trust_remote_code or tokenizer is not None:
            raise ValueError("the reference LLM runs one process on the CPU: "
                             "tensor_parallel_size 1, no remote code, no tokenizer object")
        self.args = ReferenceLlmArgs.from_kwargs(kwargs)
        kv = self.args.kv_cache_config
        engine = load_reference_engine(Path(model), tokens_per_block=kv.tokens_per_block)
        self._start(engine)

    @classmethod
    def _from_engine(cls, engine: ReferenceEngine, *, transceiver: Any = None,
                     **kwargs: Any) -> LLM:
        """An LLM over an engine already in memory, optionally with a stand-in for the UCX
        transceiver (tests)."""
        llm = cls.__new__(cls)
        llm.args = ReferenceLlmArgs.from_kwargs(kwargs)
        llm._start(engine, transceiver)
        return llm

    def _start(self, engine: ReferenceEngine, transceiver_standin: Any = None) -> None:
        self.tokenizer = None  # token ids in, token ids out
        self._engine = engine
        self._max_seq_len = self.args.max_seq_len or int(
            engine.model.config.max_position_embeddings)
        kv = self.args.kv_cache_config
        tpb = engine.layout.tokens_per_block
        self._max_blocks = max(kv.max_tokens // tpb if kv.max_tokens else
                               self.args.max_batch_size * math.ceil(self._max_seq_len / tpb), 1)
        self._prefix_cache = PrefixCache(
            tokens_per_block=tpb, max_blocks=self._max_blocks,
            event_buffer_max_size=kv.event_buffer_max_size,
            window_size=self._max_seq_len) if kv.enable_block_reuse else None
        self._scheduler = Scheduler(engine, max_batch_size=self.args.max_batch_size,
                                    max_num_tokens=self.args.max_num_tokens,
                                    prefix_cache=self._prefix_cache,
                                    max_num_blocks=self._max_blocks,
                                    held_blocks=self._held_blocks,
                                    shared_seed=TORCH_SAMPLER_SEED if self.args.torch_sampler
                                    else None)
        self._ids = itertools.count(1)  # this LLM's request ids
        self._served = 0  # requests submitted (upstream has no stats before the first)
        self._transceiver: Any = None  # KVCacheTransceiver
        self._pulls: ThreadPoolExecutor | None = None
        self._closed = False
        transceiver = self.args.cache_transceiver_config
        if transceiver is not None and transceiver.backend not in (None, "DEFAULT", "UCX"):
            raise ValueError(f"cache_transceiver_config.backend {transceiver.backend}: the "
                             "reference LLM moves KV over UCX only")
        if transceiver is not None and transceiver_standin is not None:
            self._transceiver = transceiver_standin
        elif transceiver is not None:
            # unset, 1.2 has no timeout (the 60 s default came in the 1.3 line): a KV nobody
            # pulls is held, and a pull waits, for as long as it takes
            timeout_ms = transceiver.kv_transfer_timeout_ms
            timeout_s = math.inf if timeout_ms is None else timeout_ms / 1000
            tls = tuple(os.environ.get("UCX_TLS", "sm,tcp").split(","))
            self._transceiver = KVCacheTransceiver(engine.layout, hold_s=timeout_s,
                                                   pull_timeout_s=timeout_s, transports=tls)
            self._transceiver.start()
        if self._transceiver is not None:
            self._pulls = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pdtrt-kv-pull")
        self._scheduler.start()

    # -- requests ----------------------------------------------------------------------------
    def generate_async(self, inputs: Any, sampling_params: SamplingParams | None = None,
                       lora_request: Any = None, prompt_adapter_request: Any = None,
                       streaming: bool = False, kv_cache_retention_config: Any = None,
                       disaggregated_params: DisaggregatedParams | None = None,
                       _postproc_params: Any = None, scheduling_params: Any = None,
                       cache_salt: str | None = None) -> RequestOutput:
        """Submit one prompt (token ids, or ``{"prompt_token_ids": [...]}``); returns at once.
        Raises ``ValueError`` / ``TypeError`` for what the engine cannot serve."""
        unused = {"lora_request": lora_request, "prompt_adapter_request": prompt_adapter_request,
                  "kv_cache_retention_config": kv_cache_retention_config,
                  "_postproc_params": _postproc_params, "scheduling_params": scheduling_params,
                  "cache_salt": cache_salt}
        if named := [k for k, v in unused.items() if v is not None]:
            raise ValueError(f"the reference LLM does not implement {', '.join(named)}")
        if self._closed:
            raise RuntimeError("the LLM has been shut down")
        prompt = _prompt(inputs)
        mode = RequestType(disaggregated_params.request_type or RequestType.CONTEXT_AND_GENERATION
                           ) if disaggregated_params is not None else \
            RequestType.CONTEXT_AND_GENERATION
        if disaggregated_params is not None and (named := unsupported(disaggregated_params)):
            raise ValueError(f"the reference LLM does not implement DisaggregatedParams."
                             f"{', DisaggregatedParams.'.join(named)}")
        if mode is RequestType.CONTEXT_ONLY and sampling_params is not None:
            sampling_params.max_tokens = 1  # upstream's PyTorch flow forces it, on the caller's
        params = self._check(sampling_params, len(prompt), mode)
        first_logprobs = _first_logprobs(disaggregated_params, bool(params.logprobs)) \
            if mode is RequestType.GENERATION_ONLY and disaggregated_params is not None else ()
        if mode is not RequestType.CONTEXT_AND_GENERATION and self._transceiver is None:
            raise ValueError(f"{mode} requests need cache_transceiver_config: the KV cache "
                             "transceiver is disabled")
        if mode is RequestType.CONTEXT_ONLY and not self.args.disable_overlap_scheduler:
            raise ValueError(_OVERLAP_REFUSAL)
        self._served += 1
        marks = PerfMarks(arrival=steady_now()) if params.return_perf_metrics else None
        # a field of the 1.3 line (disagg_request_id: one request id for both phases); the
        # pinned class has none, a newer one passed in tests may
        disagg_id = getattr(disaggregated_params, "disagg_request_id", None)
        result = RequestOutput(next(self._ids) if disagg_id is None else disagg_id, prompt,
                               on_abort=self._abort)
        seq = SeqRequest(request_id=str(result.request_id), prompt=prompt,
                         max_new_tokens=params.max_tokens,
                         end_id=None if params.end_id is None or params.end_id < 0
                         else params.end_id,
                         sampling=_sampling(params, torch_sampler=self.args.torch_sampler,
                                            prompt_len=len(prompt)),
                         stop_words=tuple(tuple(w) for w in params._get_stop_words() if w),
                         mode=mode, emit=self._emitter(result, params, seq_mode=mode,
                                                       streaming=streaming,
                                                       caller=disaggregated_params,
                                                       prompt_len=len(prompt), marks=marks),
                         first_logprobs=first_logprobs,
                         is_cancelled=lambda: result.aborted() or self._closed)
        if mode is RequestType.GENERATION_ONLY:
            assert self._pulls is not None and disaggregated_params is not None
            self._pulls.submit(self._pull_then_submit, seq, disaggregated_params, result, marks)
        else:
            self._scheduler.submit(seq)
        return result

    def _check(self, params: SamplingParams | None, prompt_len: int,
               mode: RequestType) -> SamplingParams:
        """Upstream's refusals (``_check_arguments``) and its clamp (``_deduce_max_tokens``),
        plus the reference's own for what it does not implement."""
        if params is None or params.end_id is None:
            raise ValueError("a tokenizer is required to set end_id: pass SamplingParams with "
                             "end_id (the reference LLM has no tokenizer)")
        if named := params._unimplemented():
            raise ValueError(f"the reference LLM does not implement {', '.join(named)}")
        # logprobs = k: 1.2.1 sets no bound (main's cap of 20 came with PR #13520, after it);
        # its TorchSampler's torch.topk fails on a k outside 0..vocab, and so does this
        vocab = int(self._engine.model.config.vocab_size)
        if params.logprobs is not None and not 0 <= params.logprobs <= vocab:
            raise ValueError(f"logprobs ({params.logprobs}) must be in 0..{vocab} (the "
                             "vocabulary): the top-k log-probabilities come from torch.topk")
        # llm.py _check_arguments (PyTorch backend): without chunked prefill a prompt must fit
        # one step's max_num_tokens; a generation-only request brings its KV and is not checked
        budget = self.args.max_num_tokens
        if not self.args.enable_chunked_prefill and mode is not RequestType.GENERATION_ONLY \
                and budget and prompt_len > budget:
            raise ValueError(f"The sum of prompt length ({float(prompt_len)}), query length (0) "
                             f"should not exceed max_num_tokens ({budget})")
        if params.max_tokens < 1:
            raise ValueError(f"max_tokens ({params.max_tokens}) must be at least 1")
        # executor/base_worker.py _deduce_max_tokens: the PyTorch flow clamps max_tokens to what
        # max_seq_len leaves after the prompt (with a warning); nothing left is refused here
        left = self._max_seq_len - prompt_len
        if left < 1:
            raise ValueError(f"prompt length ({prompt_len}) leaves no room under max_seq_len "
                             f"({self._max_seq_len})")
        if params.max_tokens > left:
            log.warning("User-specified `max_tokens` (%d) is greater than deduced "
                        "`default_max_tokens` (%d), using default_max_tokens instead.",
                        params.max_tokens, left)
            params.max_tokens = left
        return params

    def _emitter(self, result: RequestOutput, params: SamplingParams, *, seq_mode: RequestType,
                 streaming: bool, caller: DisaggregatedParams | None, prompt_len: int,
                 marks: PerfMarks | None = None) -> Callable[[Emission], None]:
        pending: list[int] = []  # tokens not in a response yet (stream_due says when)
        pending_lp: list[TokenLogprobs] = []
        emitted = [0]  # output tokens pushed so far
        decoding_iter = [0]  # upstream's py_decoding_iter: emissions so far
        interval = self.args.stream_interval
        stop_reasons = {tuple(w): r for r, w in params._get_stop_reasons_and_words()}

        def logprobs(tokens: tuple[int, ...], lps: tuple[TokenLogprobs, ...]
                     ) -> tuple[TokenLogprobs, ...] | None:
            """One entry per token that has one (its top-k and itself, :func:`.engine.
            top_logprobs`): a generation-only request's first tokens have none unless the
            caller handed them over (``first_gen_log_probs``, which the pinned release lacks),
            so its list is that much shorter, at the front."""
            if not params.logprobs:
                return None
            return tuple(lps[len(lps) - min(len(tokens), len(lps)):])

        def emit(em: Emission) -> None:
            if em.error is not None:
                result._push(ExecutorResponse(tokens=(), final=True, error=em.error))
                return
            if marks is not None and em.tokens:
                marks.tokens()
            decoding_iter[0] += 1
            if not em.final and not (streaming and stream_due(decoding_iter[0], interval)):
                pending.extend(em.tokens)
                pending_lp.extend(em.logprobs)
                return
            tokens, lps = (*pending, *em.tokens), (*pending_lp, *em.logprobs)
            pending.clear()
            pending_lp.clear()
            emitted[0] += len(tokens)
            if not em.final:
                result._push(ExecutorResponse(tokens=tokens, final=False,
                                              logprobs=logprobs(tokens, lps)))
                return
            disagg = caller if seq_mode is RequestType.CONTEXT_ONLY else None
            if seq_mode is RequestType.CONTEXT_ONLY and em.kv is not None \
                    and self._transceiver is not None and not result.aborted():
                state = self._transceiver.offer(em.kv, prompt_len, str(result.request_id))
                disagg = DisaggregatedParams(request_type="context_only",
                                             first_gen_tokens=list(em.tokens),
                                             ctx_request_id=result.request_id, opaque_state=state)
            reason = "cancelled" if em.cancelled else em.finish_reason
            # upstream _handle_sequence: the stop word that ended the output is its stop_reason
            # and is cut from token_ids unless include_stop_str_in_output (a word that began in
            # the prompt is neither)
            word = em.stop_word
            in_output = word is not None and len(word) <= emitted[0]
            result._push(ExecutorResponse(tokens=tokens, final=True, finish_reason=reason,
                              disaggregated_params=disagg, logprobs=logprobs(tokens, lps),
                              stop_reason=stop_reasons.get(word) if in_output else None,
                              cut=len(word) if in_output and word is not None
                              and not params.include_stop_str_in_output else 0,
                              perf_metrics=None if marks is None else marks.metrics()))

        return emit

    def _pull_then_submit(self, seq: SeqRequest, params: DisaggregatedParams,
                          result: RequestOutput, marks: PerfMarks | None = None) -> None:
        try:
            if not params.opaque_state or not params.first_gen_tokens:
                raise ValueError("generation_only needs disaggregated_params with opaque_state "
                                 "and first_gen_tokens from a context_only request")
            assert self._transceiver is not None
            start = steady_now()
            seq.imported_kv = self._transceiver.pull(params.opaque_state, len(seq.prompt))
            if marks is not None:  # the pull's time and bytes (upstream: the cache receiver's)
                marks.kv_start, marks.kv_end = start, steady_now()
                marks.kv_size = sum(k.nbytes + v.nbytes for k, v in seq.imported_kv)
            seq.first_tokens = tuple(params.first_gen_tokens)
        except Exception as exc:
            result._push(ExecutorResponse(tokens=(), final=True,
                              error=f"KV transfer failed: {getattr(exc, 'message', exc)}"))
            return
        self._scheduler.submit(seq)

    def _abort(self, result: RequestOutput) -> None:
        """A running request is cancelled by the scheduler (``is_cancelled``); a finished one
        is left as it is, its held KV included (upstream's ``abort_request``)."""
        if result._done_in_executor():
            log.info("Request of client_id %s is finished, cannot abort it.", result.request_id)

    def _held_blocks(self) -> int:
        """KV blocks the transceiver holds for pickup: they stay allocated in the pool until
        pulled or expired, as upstream's context server keeps them."""
        if self._transceiver is None:
            return 0
        tpb = self._engine.layout.tokens_per_block
        return sum(-(-n // tpb) for n in self._transceiver.held_prompt_lens())

    # -- stats and the end -------------------------------------------------------------------
    def get_stats(self, timeout: float | None = 2) -> list[dict[str, Any]]:
        """Iteration stats as upstream returns them: nothing unless ``enable_iter_perf_stats``
        is set (after waiting ``timeout`` for stats that never come) and nothing before the
        first request (with upstream's warning); else one snapshot of the current iteration with
        a subset of TensorRT-LLM's IterationStats keys (upstream returns every iteration since
        the last call)."""
        if not self.args.enable_iter_perf_stats:
            if timeout:
                time.sleep(timeout)
            return []
        if not self._served:
            log.warning("No stats available; submit requests first")
            return []
        tpb = self._engine.layout.tokens_per_block
        max_blocks = self._max_blocks
        used = math.ceil(self._scheduler.num_kv_tokens / tpb)
        reuse = self._prefix_cache.stats if self._prefix_cache else BlockReuseStats()
        return [{
            "iter": self._scheduler.steps, "numActiveRequests": self._scheduler.num_running,
            "numQueuedRequests": self._scheduler.num_queued,
            "kvCacheStats": {"maxNumBlocks": max_blocks, "usedNumBlocks": used,
                             "freeNumBlocks": max_blocks - used, "tokensPerBlock": tpb,
                             "reusedBlocks": reuse.reused_blocks,
                             "missedBlocks": reuse.missed_blocks,
                             "cacheHitRate": reuse.hit_rate}}]

    def get_kv_cache_events(self, timeout: float | None = 2) -> list[dict[str, Any]]:
        """The KV cache events since the last call, in TensorRT-LLM's JSON shape
        (:mod:`.prefix_cache`), waiting up to ``timeout`` for one. Events need
        ``kv_cache_config.enable_block_reuse`` and ``event_buffer_max_size > 0``, as upstream
        (llm.py at 4c05a748); without them there are none."""
        deadline = time.monotonic() + (timeout or 0)
        while True:
            events = self._prefix_cache.events() if self._prefix_cache else []
            if events or time.monotonic() >= deadline:
                return events
            time.sleep(min(0.05, max(deadline - time.monotonic(), 0)))

    def _pdtrt_kv_transfer_stats(self) -> dict[str, float]:
        """The UCX transceiver's counters (held, offered, served, expired, pulled, bytes,
        seconds); empty without one. pdtrt's extension: tensorrt_llm has no such call."""
        return {} if self._transceiver is None else self._transceiver.stats()

    def _pdtrt_set_fault_hook(self, hook: Any) -> None:
        """pdtrt's failure-path tests: ``hook.before_decode(request_ids)`` runs before every
        batched decode step, ``hook.kv_transfer_fault(request_id)`` when a KV is offered
        (:mod:`pdtrt.runtime.faults`). Not part of the LLM API."""
        self._scheduler.faults = hook
        if isinstance(self._transceiver, KVCacheTransceiver):
            self._transceiver.faults = hook

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._scheduler.stop()
        if self._pulls is not None:
            self._pulls.shutdown(wait=False, cancel_futures=True)
        if self._transceiver is not None:
            self._transceiver.stop()


def stream_due(decoding_iter: int, stream_interval: int) -> bool:
    """Whether a streaming request gets a response at its ``decoding_iter``-th iteration
    (1: the one that made its first token -- for a generation-only request the one that
    appended the imported first token): at the first, then every ``stream_interval``-th;
    the last one always does (the caller's ``final``). A response carries every token since
    the previous one.

    Upstream's rule: ``PyExecutor._handle_responses`` answers a request when
    ``py_decoding_iter == 1 or is_finished or py_decoding_iter % stream_interval == 0``
    (tensorrt_llm/_torch/pyexecutor/py_executor.py, read at Tabrizian/TensorRT-LLM
    5382fd3c680043160e4dd074ce2877b141092232, the copy nearest release/1.2 found:
    pdtrt/data/targets/trtllm-1.2-llmapi.yaml says how near), and a generation-only request
    starts at ``py_decoding_iter = 1`` when its first token is appended
    (``_prepare_disagg_gen_transmission_complete``, read at NVIDIA/TensorRT-LLM
    9521caf4696c1fb79b0f946f0d980f8f0ebd3e64 -- an older file, whose ``_handle_responses``
    still counted the executor's iterations, ``iter_counter % stream_interval``, not the
    request's). One token per iteration at beam width 1 without speculation, so the k-th
    iteration is the k-th token."""
    return decoding_iter == 1 or decoding_iter % stream_interval == 0


def _prompt(inputs: Any) -> list[int]:
    ids = inputs.get("prompt_token_ids") if isinstance(inputs, dict) else inputs
    if not isinstance(ids, list | tuple) or not ids or \
            not all(isinstance(t, int) for t in ids):
        raise TypeError("the reference LLM takes token ids (a list of int or "
                        "{'prompt_token_ids': [...]}); it has no tokenizer")
    return [int(t) for t in ids]


def _sampling(params: SamplingParams, *, torch_sampler: bool, prompt_len: int) -> SequenceSampling:
    """The engine's view of ``params`` under the LLM's sampler (None: the runtime's default;
    min_tokens None or < 1 bans nothing -- see docs/verification.md for the runtime's default
    of 1).

    TRTLLMSampler (the C++ decoder) applies every field. TensorRT-LLM 1.2's TorchSampler
    does not: it ignores the repetition, presence and frequency penalties (they came with
    TensorRT-LLM #16485; issue #9442) and the bad words (#16052), and compares ``min_tokens``
    with the prompt's tokens plus the generated ones (#12166 made it count generated tokens
    only), so here its ban lasts ``min_tokens - prompt_len`` generated tokens. Its draws come
    from one generator for all requests (the scheduler's, :data:`TORCH_SAMPLER_SEED`), not
    from the request's ``seed`` (#17172 added per-request seeds)."""
    greedy = params._greedy_decoding  # 1.2's rule: temperature 0 is greedy too
    temperature = 1.0 if params.temperature is None else params.temperature
    top_k, top_p, logprobs = params.top_k or 0, params.top_p or 0.0, params.logprobs or 0
    if torch_sampler:
        return SequenceSampling(greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p,
                        min_tokens=max((params.min_tokens or 0) - prompt_len, 0),
                        logprobs=logprobs)
    return SequenceSampling(
        greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p,
        seed=params.seed or 0,
        repetition_penalty=1.0 if params.repetition_penalty is None
        else params.repetition_penalty,
        presence_penalty=params.presence_penalty or 0.0,
        frequency_penalty=params.frequency_penalty or 0.0,
        min_tokens=params.min_tokens or 0,
        bad_words=tuple(tuple(w) for w in params._get_bad_words() if w),
        logprobs=logprobs)


def _first_logprobs(params: DisaggregatedParams, asked: bool) -> tuple[TokenLogprobs, ...]:
    """The log-probabilities of a generation-only request's first token(s) when the caller
    hands them over in ``first_gen_log_probs`` (one ``{token: Logprob}`` per token; a field of
    TensorRT-LLM's 1.3 line, PR #11727, absent from the pinned class); else none -- the
    generation side never sampled those tokens, so its log-probs start after them."""
    given = getattr(params, "first_gen_log_probs", None)
    tokens = params.first_gen_tokens or []
    if not asked or given is None:
        return ()
    if len(given) != len(tokens):
        raise ValueError(f"DisaggregatedParams.first_gen_log_probs holds {len(given)} entries "
                         f"for {len(tokens)} first_gen_tokens")
    if missing := [t for t, d in zip(tokens, given, strict=True) if t not in d]:
        raise ValueError(f"DisaggregatedParams.first_gen_log_probs lacks its tokens {missing}")
    return tuple({int(t): _logprob(v) for t, v in d.items()} for d in given)


def _logprob(value: Any) -> Logprob:
    """A ``Logprob`` of one entry of ``first_gen_log_probs`` (a Logprob-like, or a float)."""
    return Logprob(float(getattr(value, "logprob", value)), getattr(value, "rank", None))

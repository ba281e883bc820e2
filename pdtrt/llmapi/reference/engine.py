"""The reference engine: a Hugging Face Llama-family model on PyTorch, phase by phase.

``prefill()`` runs a prompt and returns the logits of its last position and its KV cache;
``decode_step()`` advances a batch of sequences by one token each. Sequences of different
lengths are batched by left-padding their caches and masking the pads (positions stay each
sequence's own). The KV of one sequence is a tuple over layers of ``(k, v)`` tensors shaped
``[1, kv_heads, seq, head_dim]``; :func:`pack_kv` / :func:`unpack_kv` turn it into one
contiguous byte buffer (for UCX) and back.

This is a CPU reference, not a fast engine: its job is to be *exactly* right (greedy output equal
to ``transformers``' ``generate()``) so the disaggregated path can be checked end to end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pdtrt.engine_dir import KVLayout
from pdtrt.enums import KVDType
from pdtrt.llmapi.reference.outputs import Logprob

__all__ = ["KV", "ReferenceEngine", "SequenceSampling", "draw_seed", "load_reference_engine",
           "pack_kv", "process", "sample", "top_logprobs", "unpack_kv", "TokenLogprobs"]

KV = tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per layer (k, v): [1, H_kv, S, D]
TokenLogprobs = dict[int, Logprob]  # one output token's entry: its top-k and itself


@dataclass(frozen=True, kw_only=True)
class SequenceSampling:
    """How one sequence picks its next token: the arg-max (``greedy``), or a draw after
    ``temperature``, top-k (0: off) and top-p (0 or 1: off) from a generator seeded with
    ``seed`` and the token's position (:func:`draw_seed`), or under TorchSampler from the LLM's
    one generator (the scheduler's). Before either, the logits go through TensorRT-LLM's
    penalties and bans (:func:`process`). This is what the engine does, after the LLM's
    sampler dropped what it ignores (``_sampling`` in :mod:`pdtrt.llmapi.reference.llm`).
    Whether a request is greedy is the LLM API's rule, decided by its caller
    (``SamplingParams._greedy_decoding``, :mod:`pdtrt.llmapi.reference.params`)."""

    greedy: bool = True
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 0.0
    seed: int = 0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    min_tokens: int = 0  # the end id is banned while fewer tokens than this were generated
    bad_words: tuple[tuple[int, ...], ...] = ()
    logprobs: int = 0  # k: report each sampled token's top-k log-probabilities (0: none)

    @property
    def penalised(self) -> bool:
        """A repetition, presence or frequency penalty applies."""
        return (self.repetition_penalty != 1.0 or self.presence_penalty != 0.0
                or self.frequency_penalty != 0.0)

    @property
    def reads_history(self) -> bool:
        """Picking a token needs the prompt and output so far (penalties, bad words)."""
        return self.penalised or bool(self.bad_words)


def process(logits: torch.Tensor, params: SequenceSampling, tokens: Sequence[int],
            num_generated: int, end_id: int | None) -> torch.Tensor:
    """The scores a token is picked from, as TensorRT-LLM's sampling layers make them
    (``batchApplyPenalty``, cpp/tensorrt_llm/kernels/penaltyKernels.cu at 249d93d551e8ec11d6d6
    2aabfc9ca8df41ead84c, then the bad-words ban): temperature (sampling only: greedy is the
    arg-max of the unscaled logits); then for every token that occurs in ``tokens`` (the prompt
    and the output so far) the repetition penalty (a positive score divided, a negative one
    multiplied), the presence penalty (subtracted once) and the frequency penalty (subtracted
    per occurrence); the end id banned while ``num_generated < min_tokens``; the last token of
    each bad word banned where the tokens end with the rest of it (a one-token word: always).
    The same rules as ``transformers``' repetition-penalty, min-new-tokens and no-bad-words
    processors, against which tests/llmapi checks them."""
    scores = logits.float()
    if not params.greedy:
        scores = scores / params.temperature
    if params.penalised and tokens:
        counts = torch.bincount(torch.tensor(list(tokens)), minlength=scores.numel())
        counts = counts[:scores.numel()]
        seen = counts > 0
        if params.repetition_penalty != 1.0:
            scores = torch.where(seen & (scores < 0), scores * params.repetition_penalty,
                                 torch.where(seen, scores / params.repetition_penalty, scores))
        scores = scores - seen.float() * params.presence_penalty \
            - counts.float() * params.frequency_penalty
    banned = [w[-1] for w in params.bad_words
              if len(w) == 1 or (len(tokens) >= len(w) - 1
                                 and tuple(tokens[len(tokens) - len(w) + 1:]) == w[:-1])]
    if end_id is not None and num_generated < params.min_tokens:
        banned.append(end_id)
    if banned:
        scores = scores.index_fill(0, torch.tensor(banned), float("-inf"))
    return scores


def draw_seed(seed: int, position: int) -> int:
    """The generator seed of the draw of the token at ``position`` of the sequence (prompt and
    output): a function of the request's seed and the position only, so a sequence split
    between a prefill and a decode engine -- or continued from a prompt that holds its output
    so far, as the router's migration does -- draws what it would have drawn in one
    (counter-based, like the per-request curand state upstream offsets by step)."""
    return (seed * 1_000_003 + position) % (1 << 63)


def sample(scores: torch.Tensor, params: SequenceSampling, generator: torch.Generator | None = None
           ) -> tuple[int, TokenLogprobs | None]:
    """One token id from the processed ``scores`` ``[vocab]`` (:func:`process`), and, when
    ``params.logprobs`` is k > 0, its log-probabilities: TensorRT-LLM's ``{token: Logprob}``
    entry (:func:`top_logprobs`)."""
    if params.greedy:
        token = int(torch.argmax(scores))
    else:
        token = _draw(scores, params, generator)
    return token, top_logprobs(scores, token, params.logprobs) if params.logprobs else None


def top_logprobs(scores: torch.Tensor, token: int, k: int) -> TokenLogprobs:
    """The log-softmax of ``scores`` ``[vocab]`` at its ``k`` best tokens, ranked 1..k, plus
    ``token`` (the chosen one) with its own rank where it is not among them.

    The shape of TensorRT-LLM's PyTorch sampler: ``TorchSampler`` takes ``torch.topk`` of the
    log-softmax and ranks the entries 1..k (``handle_logprobs``, tensorrt_llm/_torch/pyexecutor/
    sampler.py; the stored copy near the 1.2 cut has only the top-k, main's
    ``_store_logprobs_list_to_request`` adds the sampled token when it is missing, with its
    rank). The twin always holds the chosen token, as main does; which of the two 1.2.1 ships is
    not visible from here (docs/verification.md)."""
    logprobs = torch.log_softmax(scores.float(), dim=-1)  # [vocab]
    values, ids = torch.topk(logprobs, min(int(k), logprobs.numel()))  # [k], [k]
    entry = {int(t): Logprob(float(v), rank) for rank, (t, v) in
             enumerate(zip(ids.tolist(), values.tolist(), strict=True), 1)}
    if token not in entry:
        chosen = logprobs[token]
        entry[token] = Logprob(float(chosen), int((logprobs > chosen).sum()) + 1)
    return entry


def _draw(scores: torch.Tensor, params: SequenceSampling, generator: torch.Generator | None) -> int:
    if params.top_k > 0:
        kth = torch.topk(scores, min(params.top_k, scores.numel())).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if 0.0 < params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True)
        cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
        drop = cumulative - torch.softmax(sorted_scores, dim=-1) > params.top_p
        scores = scores.scatter(0, order[drop], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


class ReferenceEngine:
    """One model in memory; not thread-safe (one scheduler thread drives it)."""

    max_beam_width = 1  # greedy or sampled, one sequence per request: no beam search

    def __init__(self, model: torch.nn.Module, *, tokens_per_block: int) -> None:
        self.model = model.eval()
        cfg = model.config
        self.num_layers = int(cfg.num_hidden_layers)
        self.num_kv_heads = int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None)
                            or cfg.hidden_size // cfg.num_attention_heads)
        self.dtype = next(model.parameters()).dtype
        self.layout = KVLayout(num_layers=self.num_layers, num_kv_heads=self.num_kv_heads,
                               head_dim=self.head_dim, kv_dtype=_KV_DTYPE[self.dtype],
                               tokens_per_block=tokens_per_block)

    @torch.inference_mode()
    def prefill(self, input_ids: list[int], past: KV | None = None) -> tuple[torch.Tensor, KV]:
        """Logits of the last prompt position ``[vocab]`` and the prompt's KV. With ``past``
        (the KV of the prompt's first tokens, from the prefix cache) only ``input_ids`` -- the
        rest of the prompt -- is computed, at the positions after it."""
        from transformers import DynamicCache

        ids = torch.tensor([input_ids], dtype=torch.long)  # [1, S]
        if past is None:
            out = self.model(input_ids=ids, past_key_values=DynamicCache(), use_cache=True)
        else:
            done = past[0][0].shape[2]
            positions = torch.arange(done, done + len(input_ids)).unsqueeze(0)
            out = self.model(input_ids=ids, position_ids=positions,
                             past_key_values=DynamicCache.from_legacy_cache(past),
                             use_cache=True)
        cache = out.past_key_values
        kv = tuple((layer.keys, layer.values) for layer in cache.layers)  # [1, H, S, D]
        return out.logits[0, -1], kv

    @torch.inference_mode()
    def decode_step(self, batch: list[tuple[int, KV]]) -> list[tuple[torch.Tensor, KV]]:
        """Feed each sequence's last token; returns its next-token logits and extended KV."""
        from transformers import DynamicCache

        lengths = [kv[0][0].shape[2] for _, kv in batch]
        longest = max(lengths)
        layers = []
        for layer in range(self.num_layers):
            ks, vs = [], []
            for (_, kv), n in zip(batch, lengths, strict=True):
                k, v = kv[layer]  # [1, H, n, D]
                pad = longest - n
                if pad:
                    k = torch.nn.functional.pad(k, (0, 0, pad, 0))  # left-pad the seq dim
                    v = torch.nn.functional.pad(v, (0, 0, pad, 0))
                ks.append(k)
                vs.append(v)
            layers.append((torch.cat(ks), torch.cat(vs)))  # [B, H, longest, D]
        mask = torch.zeros(len(batch), longest + 1, dtype=torch.long)  # [B, longest + 1]
        for i, n in enumerate(lengths):
            mask[i, longest - n:] = 1
        ids = torch.tensor([[token] for token, _ in batch], dtype=torch.long)  # [B, 1]
        positions = torch.tensor([[n] for n in lengths], dtype=torch.long)  # [B, 1]
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         past_key_values=DynamicCache.from_legacy_cache(tuple(layers)),
                         use_cache=True)
        cache = out.past_key_values.layers
        results = []
        for i, n in enumerate(lengths):
            start = longest - n
            kv = tuple((layer.keys[i:i + 1, :, start:], layer.values[i:i + 1, :, start:])
                       for layer in cache)  # [1, H, n + 1, D]
            results.append((out.logits[i, -1], kv))
        return results


_KV_DTYPE = {torch.float32: KVDType.FP32, torch.bfloat16: KVDType.BF16,
             torch.float16: KVDType.FP16}
_TORCH_DTYPE = {v: k for k, v in _KV_DTYPE.items()}


def pack_kv(kv: KV) -> np.ndarray:
    """One contiguous uint8 buffer: ``[layers, 2, H, S, D]`` in the cache dtype."""
    stacked = torch.stack([torch.stack((k[0], v[0])) for k, v in kv])  # [L, 2, H, S, D]
    return stacked.contiguous().view(torch.uint8).numpy().reshape(-1)


def unpack_kv(buffer: np.ndarray, layout: KVLayout, seq_len: int) -> KV:
    """Inverse of :func:`pack_kv` for a sequence of ``seq_len`` tokens."""
    dtype = _TORCH_DTYPE[layout.kv_dtype]
    shape = (layout.num_layers, 2, layout.num_kv_heads, seq_len, layout.head_dim)
    t = torch.from_numpy(np.ascontiguousarray(buffer)).view(dtype).reshape(shape)
    return tuple((t[i, 0].unsqueeze(0).clone(), t[i, 1].unsqueeze(0).clone())
                 for i in range(layout.num_layers))


def load_reference_engine(checkpoint_dir: Path, *, tokens_per_block: int,
                          num_threads: int = 1) -> ReferenceEngine:
    """Load a local HF checkpoint (no remote code, no network) on the CPU."""
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(num_threads)
    model = AutoModelForCausalLM.from_pretrained(str(checkpoint_dir), local_files_only=True,
                                                 trust_remote_code=False)
    return ReferenceEngine(model, tokens_per_block=tokens_per_block)

"""A model's facts and its memory fit on chosen GPUs, as one report (``pdtrt model-info``)."""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt.enums import DType, KVDType, WeightQuant
from pdtrt.errors import InfeasibleError
from pdtrt.facts.catalog import GPU
from pdtrt.facts.memory import MemoryFit, fit, min_tp_that_fits
from pdtrt.facts.model import ModelFacts

__all__ = ["ModelReport", "model_report"]


@dataclass(frozen=True, kw_only=True)
class ModelReport:
    model: ModelFacts
    dtype: DType
    weights: WeightQuant
    kv_dtype: KVDType
    isl: int
    osl: int
    fits: tuple[MemoryFit, ...]

    @property
    def weight_bytes(self) -> int:
        return self.model.weight_bytes(self.dtype, self.weights)

    @property
    def kv_bytes_per_token(self) -> int:
        """At TP 1; each fit carries its own per-rank value."""
        return self.model.kv_bytes_per_token(self.kv_dtype)

    @property
    def prefill_flops_per_token(self) -> float:
        return self.model.prefill_flops_per_token(self.isl)

    @property
    def decode_flops_per_token(self) -> float:
        """At the middle of the output, context ``isl + osl/2``."""
        return self.model.decode_flops_per_token(self.isl + self.osl // 2)

    def to_dict(self) -> dict[str, object]:
        m = self.model
        return {
            "model": m.name,
            "model_type": m.model_type,
            "num_layers": m.num_layers,
            "hidden_size": m.hidden_size,
            "num_heads": m.num_heads,
            "num_kv_heads": m.num_kv_heads,
            "head_dim": m.head_dim,
            "intermediate_size": m.intermediate_size,
            "vocab_size": m.vocab_size,
            "num_params": m.num_params,
            "dtype": str(self.dtype),
            "weights": str(self.weights),
            "kv_cache_dtype": str(self.kv_dtype),
            "weight_bytes": self.weight_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "isl": self.isl,
            "osl": self.osl,
            "prefill_flops_per_token": self.prefill_flops_per_token,
            "decode_flops_per_token": self.decode_flops_per_token,
            "valid_tp": m.valid_tps(),
            "fits": [f.to_dict() for f in self.fits],
        }


def model_report(
    model: ModelFacts,
    gpus: list[GPU],
    *,
    tp: int | None = None,
    isl: int,
    osl: int,
    dtype: DType = DType.BF16,
    weights: WeightQuant = WeightQuant.NONE,
    kv_dtype: KVDType = KVDType.BF16,
    max_num_tokens: int = 8192,
    tokens_per_block: int = 32,
    kv_cache_fraction: float = 0.9,
) -> ModelReport:
    """Facts of ``model`` and its fit on each GPU: at ``tp``, or at the smallest TP that fits.

    Raises :class:`InfeasibleError` if ``tp`` cannot split the model, or (without ``tp``) if the
    model does not fit on a GPU at any TP.
    """
    if tp is not None:
        problem = model.tp_problem(tp)
        if problem:
            raise InfeasibleError(problem, hint=f"valid TP for {model.name}: {model.valid_tps()}")
    kwargs = dict(seq_len=isl + osl, dtype=dtype, weights=weights, kv_dtype=kv_dtype,
                  max_num_tokens=max_num_tokens, tokens_per_block=tokens_per_block,
                  kv_cache_fraction=kv_cache_fraction)
    fits = tuple(
        fit(model, gpu, tp=tp, **kwargs) if tp is not None  # type: ignore[arg-type]
        else min_tp_that_fits(model, gpu, **kwargs)
        for gpu in gpus
    )
    return ModelReport(model=model, dtype=dtype, weights=weights, kv_dtype=kv_dtype, isl=isl,
                       osl=osl, fits=fits)

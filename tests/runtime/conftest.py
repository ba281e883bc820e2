from __future__ import annotations

import importlib.util

import pytest

HAVE_TORCH = importlib.util.find_spec("torch") is not None and (
    importlib.util.find_spec("transformers") is not None)


@pytest.fixture(scope="session")
def tiny_model():
    """The tiny seeded Llama of the reference target (same config as pdtrt/tiny-llama)."""
    if not HAVE_TORCH:
        pytest.skip("torch / transformers (the reference extra) are not installed")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


def hf_greedy(model, prompt, n):
    import torch

    out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@pytest.fixture
def router(monkeypatch):
    """``router(phases, clock=..., **params)``: a router model on the fake seam
    (``test_router_model.new_router``), finalized after the test. Its counters are sent at
    once (not every ``METRICS_FLUSH_S``), so a test reads them as soon as its requests end."""
    from pdtrt.runtime.router import metrics as router_metrics
    from tests.runtime.test_router_model import new_router

    monkeypatch.setattr(router_metrics, "METRICS_FLUSH_S", 0.0)

    made = []

    def make(phases, **params):
        made.append(new_router(phases, **params))
        return made[-1]

    yield make
    for model, _triton in made:
        model.finalize()

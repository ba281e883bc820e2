from __future__ import annotations

import pytest

from tests.runtime.conftest import HAVE_TORCH, tiny_model  # noqa: F401 -- the shared fixture


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model, tmp_path_factory):  # noqa: F811
    """The tiny seeded Llama as a checkpoint directory (what ``LLM(model=...)`` loads)."""
    if not HAVE_TORCH:
        pytest.skip("torch / transformers (the reference extra) are not installed")
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_model.save_pretrained(path)
    return path

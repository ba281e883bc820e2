"""LLMClient against the real Triton server serving the fake_llm test fixture."""

from __future__ import annotations

import pytest
from fake_llm_server import needs_triton

from pdtrt.client import GenerateRequest, LLMClient
from pdtrt.client.types import ErrorKind
from pdtrt.errors import ModelNotFoundError, RequestError, ServerUnavailableError
from pdtrt.serve.triton_server import free_port

pytestmark = needs_triton


def test_streams_every_token_with_increasing_timestamps(llm_server):
    with LLMClient(llm_server) as client:
        result = client.generate(GenerateRequest(prompt="hello", max_tokens=6, seed=4))
    assert result.ok, result.error
    assert result.text == "".join(f" w{i}_4" for i in range(6)) and result.num_chunks == 6
    times = [c.time_s for c in result.chunks]
    assert times == sorted(times) and result.send_time_s < times[0] <= result.end_time_s
    assert result.ttft_s > 0 and len(result.itls_s) == 5


def test_non_streaming_collects_one_response(llm_server):
    with LLMClient(llm_server) as client:
        result = client.generate(GenerateRequest(prompt="hello", max_tokens=4, stream=False))
    assert result.ok and result.num_chunks == 1 and result.text.split() == [
        "w0_0", "w1_0", "w2_0", "w3_0"]


def test_many_concurrent_streams(llm_server):
    with LLMClient(llm_server) as client:
        pendings = [client.submit(GenerateRequest(prompt=f"p{i}", max_tokens=10))
                    for i in range(100)]
        results = [p.wait(timeout_s=60) for p in pendings]
    assert all(r.ok for r in results) and sum(r.num_chunks for r in results) == 1000
    assert len({r.request_id for r in results}) == 100


def test_request_error_timeout_then_the_client_still_works(llm_server):
    with LLMClient(llm_server) as client:
        bad = client.generate(GenerateRequest(prompt="  ", max_tokens=3))
        assert bad.error_kind is ErrorKind.REQUEST and "text_input is empty" in bad.error
        slow = client.generate(GenerateRequest(prompt="x", max_tokens=500), timeout_s=0.2)
        assert slow.error_kind is ErrorKind.TIMEOUT and slow.num_chunks < 500
        with pytest.raises(RequestError):
            slow.raise_for_error()
        assert client.generate(GenerateRequest(prompt="x", max_tokens=3)).num_chunks == 3


def test_unknown_model_names_the_models(llm_server):
    with LLMClient(llm_server) as client, pytest.raises(ModelNotFoundError) as info:
        client.check("ensembel")
    assert "did you mean 'ensemble'" in info.value.hint


def test_server_down_is_a_clean_error():
    with LLMClient(f"127.0.0.1:{free_port()}") as client, \
            pytest.raises(ServerUnavailableError, match="no Triton server answers"):
        client.generate(GenerateRequest(prompt="x"))

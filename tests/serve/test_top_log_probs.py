"""Top-k log-probabilities end to end on the real reference deployment (Triton 2.51, UCX between
the phases; issue 46): ``num_top_log_probs`` k through the router (prefill then decode) gives
each output token the same k alternatives, with the same log-probabilities, as the aggregated
engine model -- the first token's included, which the prefill computed and handed over in
``context_phase_params`` -- and the chosen token is among them wherever it ranks in the top k.
The OpenAI front's shapes on the same deployment: tests/front/test_openai_e2e.py."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pdtrt.client.streams import GrpcStreamClient
from pdtrt.engine_io import (
    ERROR_OUTPUT,
    TOP_LOG_PROB_IDS_OUTPUT,
    TOP_LOG_PROBS_INPUT,
    TOP_LOG_PROBS_OUTPUT,
    ModelName,
    TopLogProbs,
    top_log_probs_of,
)

pytestmark = [pytest.mark.triton, pytest.mark.slow]

PROMPT = [1, 57, 203, 88, 14, 301, 77, 9, 140, 66, 250, 31]  # token ids of the tiny vocabulary
K = 5


def run_top(url: str, model: str, n: int, request_id: str, *, prompt: list[int] = PROMPT,
            **sampling: np.ndarray) -> tuple[list[int], list[float], list[TopLogProbs]]:
    """One streamed request with ``K`` alternatives asked: (tokens, their log-probabilities,
    their alternatives), each response's appended in order."""
    inputs = {"input_ids": np.array([prompt], np.int32),
              "input_lengths": np.array([[len(prompt)]], np.int32),
              "request_output_len": np.array([[n]], np.int32),
              "end_id": np.array([[-1]], np.int32),  # n tokens, whatever comes
              "streaming": np.array([[True]]), "exclude_input_in_output": np.array([[True]]),
              "return_log_probs": np.array([[True]]),
              TOP_LOG_PROBS_INPUT: np.array([[K]], np.int32), **sampling}
    outputs = ["output_ids", "output_log_probs", TOP_LOG_PROBS_OUTPUT, TOP_LOG_PROB_IDS_OUTPUT]

    async def main() -> tuple[list[int], list[float], list[TopLogProbs]]:
        tokens: list[int] = []
        values: list[float] = []
        top: list[TopLogProbs] = []
        async for r in GrpcStreamClient(url).stream(
                model, inputs, request_id=request_id, parameters={}, outputs=outputs,
                error_output="" if model == ModelName.ROUTER else ERROR_OUTPUT):
            assert r.error is None, r.error
            if "output_ids" not in r.outputs:
                continue
            new = r.outputs["output_ids"].reshape(-1).tolist()
            rows = top_log_probs_of(r.outputs)
            assert rows is not None and len(rows) == len(new)  # one row per token
            assert r.outputs[TOP_LOG_PROBS_OUTPUT].shape == (1, len(new), K)
            tokens += new
            values += r.outputs["output_log_probs"].reshape(-1).tolist()
            top += rows
        return tokens, values, top

    return asyncio.run(asyncio.wait_for(main(), 180))


@pytest.mark.parametrize("sampling", [
    {},  # greedy
    {"temperature": np.array([[0.9]], np.float32), "runtime_top_k": np.array([[50]], np.int32),
     "random_seed": np.array([[11]], np.uint64)},
], ids=["greedy", "seeded-sampling"])
def test_the_disaggregated_path_gives_the_aggregated_paths_alternatives(reference_server,
                                                                        sampling):
    url = reference_server[0].endpoints.grpc_url
    name = "greedy" if not sampling else "sampled"
    disagg = run_top(url, ModelName.ROUTER, 12, f"top-disagg-{name}", **sampling)
    agg = run_top(url, ModelName.AGGREGATED, 12, f"top-agg-{name}", **sampling)
    (tokens, values, top), (agg_tokens, agg_values, agg_top) = disagg, agg
    assert len(tokens) == 12 and tokens == agg_tokens
    assert values == pytest.approx(agg_values, abs=1e-5)
    assert all(len(row) == K for row in top)  # K alternatives for every token, the first too
    assert [[t for t, _ in row] for row in top] == [[t for t, _ in row] for row in agg_top]
    assert [v for row in top for _, v in row] == pytest.approx(
        [v for row in agg_top for _, v in row], abs=1e-5)
    for token, value, row in zip(tokens, values, top, strict=True):
        ids, logprobs = [t for t, _ in row], [v for _, v in row]
        assert logprobs == sorted(logprobs, reverse=True) and all(v <= 0 for v in logprobs)
        if value >= logprobs[-1]:  # the chosen token ranks in the top K: it is there
            assert token in ids and logprobs[ids.index(token)] == pytest.approx(value, abs=1e-6)
        else:
            assert token not in ids
    if not sampling:  # greedy: the chosen token is the best one
        assert [row[0][0] for row in top] == tokens


def test_too_many_alternatives_are_refused_by_name(reference_server):
    url = reference_server[0].endpoints.grpc_url
    with pytest.raises(AssertionError, match=r"num_top_log_probs' is 21; allowed: 0\.\.20"):
        run_top(url, ModelName.ROUTER, 2, "top-too-many",
             **{TOP_LOG_PROBS_INPUT: np.array([[21]], np.int32)})

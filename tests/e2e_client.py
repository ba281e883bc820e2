"""A minimal streaming tritonclient helper for the end-to-end tests (independent of pdtrt's own
client library, so the tests check the server with the stock client API only)."""

from __future__ import annotations

import http.client
import json
import queue
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlparse

import numpy as np
import tritonclient.grpc as grpcclient


@dataclass
class Stream:
    texts: list[str] = field(default_factory=list)  # one entry per response with data
    times_s: list[float] = field(default_factory=list)
    error: str | None = None
    final_seen: bool = False


def _input(name: str, value: np.ndarray, dtype: str) -> grpcclient.InferInput:
    x = grpcclient.InferInput(name, list(value.shape), dtype)
    x.set_data_from_numpy(value)
    return x


def ensemble_inputs(text: str, max_tokens: int, *, stream: bool = True) -> list:
    return [_input("text_input", np.array([[text.encode()]], dtype=object), "BYTES"),
            _input("max_tokens", np.array([[max_tokens]], dtype=np.int32), "INT32"),
            _input("stream", np.array([[stream]]), "BOOL"),
            _input("exclude_input_in_output", np.array([[True]]), "BOOL")]


def sampling_inputs(**values) -> list:
    """Inputs of NVIDIA's ensemble for sampling settings by name (``stop_words`` /
    ``bad_words`` a list of strings, the others one value each)."""
    kinds = {"stop_words": ("BYTES", object), "bad_words": ("BYTES", object),
             "repetition_penalty": ("FP32", np.float32), "presence_penalty": ("FP32", np.float32),
             "frequency_penalty": ("FP32", np.float32), "min_length": ("INT32", np.int32),
             "return_log_probs": ("BOOL", bool), "random_seed": ("UINT64", np.uint64),
             "temperature": ("FP32", np.float32), "top_k": ("INT32", np.int32),
             "min_tokens": ("INT32", np.int32), "seed": ("UINT64", np.uint64),
             "return_num_input_tokens": ("BOOL", bool), "return_num_output_tokens": ("BOOL", bool)}
    made = []
    for name, value in values.items():
        kind, dtype = kinds[name]
        if dtype is object:
            array = np.array([[w.encode() for w in value]], dtype=object)
        else:
            array = np.array([[value]], dtype=dtype)
        tensor = grpcclient.InferInput(name, list(array.shape), kind)
        tensor.set_data_from_numpy(array)
        made.append(tensor)
    return made


def generate(url: str, model: str, inputs: list, *, request_id: str = "r",
             parameters: dict | None = None, output: str = "text_output",
             timeout_s: float = 120.0, cancel_after: int | None = None,
             progress: Callable[[int], None] | None = None) -> Stream:
    """Stream one request; ``cancel_after`` N responses stops the stream cancelling it;
    ``progress`` is called with the number of responses with data so far after each one. Raises
    :class:`queue.Empty` when ``timeout_s`` passes without a response (never hangs)."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    out = Stream()
    start = time.perf_counter()
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer(model, inputs, request_id=request_id,
                                  enable_empty_final_response=True, parameters=parameters)
        while True:
            result, error = results.get(timeout=timeout_s)
            if error is not None:
                out.error = str(error)
                return out
            resp = result.get_response()
            if resp.outputs:
                value = result.as_numpy(output)  # None: the response has no such output
                out.texts.append(value.reshape(-1)[0].decode() if value is not None
                                 and value.dtype == object else value)
                out.times_s.append(time.perf_counter() - start)
                if progress is not None:
                    progress(len(out.texts))
            if resp.parameters["triton_final_response"].bool_param:
                out.final_seen = True
                return out
            if cancel_after is not None and len(out.texts) >= cancel_after:
                client.stop_stream(cancel_requests=True)
                return out
    finally:
        # a stream that did not end (a timeout, an exception) is cancelled: tritonclient's plain
        # stop_stream waits for the server to end it, forever when the server is wedged
        client.stop_stream(cancel_requests=not out.final_seen)
        client.close()


def engine_inputs(ids: list[int], n: int, extra=()) -> list:
    """The engine-model (and router) inputs of one streaming request for ``ids``."""
    return [_input("input_ids", np.array([ids], dtype=np.int32), "INT32"),
            _input("input_lengths", np.array([[len(ids)]], dtype=np.int32), "INT32"),
            _input("request_output_len", np.array([[n]], dtype=np.int32), "INT32"),
            _input("streaming", np.array([[True]]), "BOOL"), *extra]


def cancel_mid_prefill(url: str, tag: str, streams: int = 50) -> None:
    """``streams`` clients each stream a long prompt to ``router`` and cancel (gRPC stream
    cancellation) 0.2 s later, while the prefills run."""
    prompt = [1] + list(range(100, 300))  # long enough that the prefill takes a while
    clients = [grpcclient.InferenceServerClient(url) for _ in range(streams)]
    try:
        for i, client in enumerate(clients):
            client.start_stream(callback=lambda result, error: None)
            client.async_stream_infer("router", engine_inputs(prompt, 32),
                                      request_id=f"{tag}-{i}", enable_empty_final_response=True)
        time.sleep(0.2)
        for client in clients:
            client.stop_stream(cancel_requests=True)
    finally:
        for client in clients:
            client.close()


def hang_up_mid_stream(front_url: str, model: str, chunks: int = 4) -> None:
    """A streamed chat to the OpenAI front at ``front_url`` whose client reads ``chunks`` SSE
    lines and then closes its connection."""
    url = urlparse(front_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": model, "messages": [{"role": "user", "content": "Tell me everything"}],
        "max_tokens": 300, "ignore_eos": True, "stream": True}),
        {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    for _ in range(chunks):
        assert response.readline()
    conn.sock.close()  # hang up mid-stream
    conn.close()


def metric(metrics_url: str, name: str, **labels: str) -> float:
    """Sum of a Prometheus metric's samples with these labels (0 when absent)."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read()
    total = 0.0
    for line in text.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    """Poll ``check`` until it holds or ``timeout_s`` passes; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def transformers_oracle(repository) -> tuple[object, Callable]:
    """(tokenizer, expected(prompt, n) -> (new ids, per-token texts, full text)): greedy
    ``generate()`` of transformers on the checkpoint and tokenizer a generated reference
    repository names (its ``pdtrt-repo.json``), stopped at the end id as the engines stop."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    manifest = json.loads((repository / "pdtrt-repo.json").read_text())
    tok = AutoTokenizer.from_pretrained(manifest["tokenizer_dir"], local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(manifest["engine_dirs"]["prefill"],
                                                 local_files_only=True).eval()

    def expected(prompt: str, n: int) -> tuple[list[int], list[str], str]:
        ids = tok.encode(prompt)
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        new = out[0, len(ids):].tolist()
        if tok.eos_token_id in new:
            new = new[:new.index(tok.eos_token_id)]
        return new, [tok.decode([t], skip_special_tokens=True) for t in new], tok.decode(
            new, skip_special_tokens=True)

    return tok, expected

"""The seam between the LLM client and the wire: one bidirectional Triton stream.

A :class:`Transport` is one gRPC stream plus the model look-ups the client needs; the client
(:mod:`pdtrt.client.client`) keeps a pool of them and sends one request at a time on each, so
every response -- including an error response, which ``tritonclient`` delivers without its
request id -- belongs to exactly one request. Tests swap in a fake transport
(``tests/fake_transport.py``); :class:`GrpcTransport` is the real one over
``tritonclient.grpc`` (``start_stream`` / ``async_stream_infer`` with
``enable_empty_final_response=True``; the end of a request is the response parameter
``triton_final_response``; ``stop_stream`` always runs, in ``close``).
"""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pdtrt.client.inputs import COUNT_OUTPUT, OUTPUT_NAME
from pdtrt.client.types import InputTensor, ModelSignature
from pdtrt.engine_io import TIMING_OUTPUT
from pdtrt.errors import ModelNotFoundError, ServerUnavailableError

__all__ = ["GrpcTransport", "StreamEvent", "Transport", "TransportFactory"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class StreamEvent:
    """One thing that came off a stream: a response's text, the final flag, or an error;
    ``timing``: the server's timing JSON (``pdtrt_timing``), when the response carries it;
    ``num_tokens``: the tokens it holds (``num_output_tokens``), when it says."""

    text: str | None = None
    timing: str | None = None
    num_tokens: int | None = None  # the response's num_output_tokens, when it carries them
    final: bool = False
    error: str | None = None
    unavailable: bool = False  # the error is the connection/stream failing, not the request


class Transport(Protocol):
    def describe(self, model: str) -> ModelSignature:
        """The model's inputs; raises ServerUnavailableError / ModelNotFoundError."""

    def start_stream(self, on_event: Callable[[StreamEvent], None]) -> None:
        """Open the stream; ``on_event`` runs on the transport's reader thread."""

    def send(self, model: str, tensors: Sequence[InputTensor], request_id: str) -> None:
        """Send one request on the open stream."""

    def close(self, *, cancel: bool) -> None:
        """Stop the stream (cancelling what is in flight when ``cancel``) and disconnect."""


TransportFactory = Callable[[], Transport]


_CONNECTION_ERRORS = ("UNAVAILABLE", "CANCELLED", "Stream removed", "Socket closed",
                      "failed to connect")


def _is_connection_error(text: str) -> bool:
    """A stream-level failure (server gone, connection cut), not the request's own error."""
    return any(marker in text for marker in _CONNECTION_ERRORS)


def _message(exc: Exception) -> str:
    msg = getattr(exc, "message", None)
    return msg() if callable(msg) else str(exc)


class GrpcTransport:
    """:class:`Transport` over ``tritonclient.grpc`` to ``url`` (``HOST:PORT``)."""

    def __init__(self, url: str, *, connect_timeout_s: float = 5.0) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self._client: Any = None
        self._streaming = False

    def _grpc(self) -> Any:
        if self._client is None:
            import tritonclient.grpc as grpcclient

            self._client = grpcclient.InferenceServerClient(self.url)
        return self._client

    def describe(self, model: str) -> ModelSignature:
        from tritonclient.utils import InferenceServerException

        client, timeout = self._grpc(), self.connect_timeout_s
        try:
            live = client.is_server_live(client_timeout=timeout)
            ready = live and client.is_server_ready(client_timeout=timeout)
        except InferenceServerException as exc:
            raise ServerUnavailableError(
                f"no Triton server answers at {self.url}: {_message(exc)}",
                hint="start one (pdtrt serve) or pass --url HOST:GRPC_PORT") from None
        if not ready:
            raise ServerUnavailableError(f"the Triton server at {self.url} is not ready",
                                         hint="wait until its models have loaded")
        try:
            model_ready = client.is_model_ready(model, client_timeout=timeout)
        except InferenceServerException:
            model_ready = False
        if not model_ready:
            index = client.get_model_repository_index(as_json=True, client_timeout=timeout)
            names = sorted(m["name"] for m in index.get("models", []))
            close = difflib.get_close_matches(model, names, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise ModelNotFoundError(
                f"the server at {self.url} has no ready model '{model}'",
                hint=hint + "models: " + (", ".join(names) or "none"))
        config = client.get_model_config(model, as_json=True, client_timeout=timeout)["config"]
        return ModelSignature(
            name=model,
            inputs={i["name"]: i["data_type"].removeprefix("TYPE_").replace("STRING", "BYTES")
                    for i in config.get("input", [])},
            outputs=tuple(o["name"] for o in config.get("output", [])),
            max_batch_size=int(config.get("max_batch_size", 0)),
            decoupled=bool(config.get("model_transaction_policy", {}).get("decoupled", False)),
            parameters={k: v["string_value"] for k, v in config.get("parameters", {}).items()
                        if "string_value" in v},
            steps=tuple(s["model_name"] for s in
                        config.get("ensemble_scheduling", {}).get("step", [])),
        )

    def start_stream(self, on_event: Callable[[StreamEvent], None]) -> None:
        def callback(result: Any, error: Any) -> None:
            if error is not None:
                text = _message(error)
                on_event(StreamEvent(error=text, final=True,
                                     unavailable=_is_connection_error(text)))
                return
            response = result.get_response()
            final = "triton_final_response" in response.parameters and \
                response.parameters["triton_final_response"].bool_param
            text = timing = num_tokens = None
            if response.outputs:
                text = _joined(result.as_numpy(OUTPUT_NAME))
                names = {o.name for o in response.outputs}
                if TIMING_OUTPUT in names:  # every response of pdtrt's ensembles carries
                    # it, empty but on the final one (ensemble.PASSED_OUTPUTS)
                    timing = _joined(result.as_numpy(TIMING_OUTPUT)) or None
                if COUNT_OUTPUT in names:
                    num_tokens = int(result.as_numpy(COUNT_OUTPUT).reshape(-1)[0])
            on_event(StreamEvent(text=text, timing=timing, num_tokens=num_tokens, final=final))

        # tritonclient reads the stream on a thread that inherits the daemon flag of the
        # thread that starts it (threading.Thread's default). Started from a daemon thread, a
        # reader still waiting on a request the server lost (its stub died) cannot keep the
        # process alive at exit (else `pdtrt bench` writes its report and never exits).
        _in_daemon_thread(lambda: self._grpc().start_stream(callback=callback))
        self._streaming = True

    def send(self, model: str, tensors: Sequence[InputTensor], request_id: str) -> None:
        import numpy as np
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import triton_to_np_dtype

        inputs = []
        for t in tensors:
            inp = grpcclient.InferInput(t.name, list(t.shape), t.datatype)
            dtype = np.object_ if t.datatype == "BYTES" else triton_to_np_dtype(t.datatype)
            inp.set_data_from_numpy(np.array(t.values, dtype=dtype).reshape(t.shape))
            inputs.append(inp)
        self._grpc().async_stream_infer(model, inputs, request_id=request_id,
                                        enable_empty_final_response=True)

    def close(self, *, cancel: bool) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        try:
            if self._streaming:
                client.stop_stream(cancel_requests=cancel)
        finally:
            self._streaming = False
            client.close()


def _joined(values: Any) -> str:
    """A string output's elements as one text ("" when absent)."""
    return "" if values is None else "".join(
        v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
        for v in values.reshape(-1))


def _in_daemon_thread(work: Callable[[], None]) -> None:
    """Run ``work`` on a daemon thread of its own and wait for it; its exception is raised."""
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 -- raised in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True, name="pdtrt-stream-start")
    thread.start()
    thread.join()
    if failed:
        raise failed[0]

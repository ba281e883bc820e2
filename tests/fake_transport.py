"""A fake :class:`pdtrt.client.Transport` (no network) and a manual clock, for client tests.

``script(model, tensors, request_id)`` returns the stream's reply as ``(advance_s, event)``
pairs: the clock moves by ``advance_s`` and then the event is delivered, synchronously inside
``send`` (like a reader thread that is very quick).
"""

from __future__ import annotations

import threading

from pdtrt.client import ModelSignature, StreamEvent
from pdtrt.errors import ModelNotFoundError, ServerUnavailableError

ENSEMBLE_INPUTS = {"text_input": "BYTES", "max_tokens": "INT32", "stream": "BOOL",
                   "exclude_input_in_output": "BOOL", "temperature": "FP32", "top_k": "INT32",
                   "top_p": "FP32", "random_seed": "UINT64"}


class ManualClock:
    def __init__(self, start_s: float = 100.0) -> None:
        self.now_s = start_s
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self.now_s

    def advance(self, dt_s: float) -> None:
        with self._lock:
            self.now_s += dt_s


def words_script(delay_s: float = 0.01):
    """Replies like fake_llm: max_tokens word chunks ``delay_s`` apart, then the final flag."""

    def script(model, tensors, request_id):
        values = {t.name: t.values[0] for t in tensors}
        if not values["text_input"]:
            return [(delay_s, StreamEvent(error="text_input is empty", final=True))]
        n = int(values["max_tokens"])
        if not values.get("stream", True):
            return [(delay_s * n, StreamEvent(text=" w" * n)), (0.0, StreamEvent(final=True))]
        return [(delay_s, StreamEvent(text=f" w{i}")) for i in range(n)] + \
            [(0.0, StreamEvent(final=True))]

    return script


class FakeTransport:
    def __init__(self, hub: FakeHub) -> None:
        self.hub = hub
        self.on_event = None
        self.closed_with: bool | None = None
        self.sent: list[tuple[str, list, str]] = []

    def describe(self, model: str) -> ModelSignature:
        if not self.hub.up:
            raise ServerUnavailableError("no Triton server answers at fake")
        if model not in self.hub.models:
            raise ModelNotFoundError(f"no ready model '{model}'")
        return ModelSignature(name=model, inputs=dict(self.hub.models[model]),
                              outputs=("text_output",))

    def start_stream(self, on_event) -> None:
        self.on_event = on_event
        self.hub.streams_started += 1

    def send(self, model, tensors, request_id) -> None:
        self.sent.append((model, list(tensors), request_id))
        for advance_s, event in self.hub.script(model, tensors, request_id):
            self.hub.clock.advance(advance_s)
            self.on_event(event)

    def close(self, *, cancel: bool) -> None:
        self.closed_with = cancel


class FakeHub:
    """The fake server: which models exist, how they reply; makes transports."""

    def __init__(self, script=None, *, models=None, clock=None) -> None:
        self.script = script or words_script()
        self.models = models if models is not None else {"ensemble": ENSEMBLE_INPUTS}
        self.clock = clock or ManualClock()
        self.up = True
        self.transports: list[FakeTransport] = []
        self.streams_started = 0

    def __call__(self) -> FakeTransport:
        transport = FakeTransport(self)
        self.transports.append(transport)
        return transport

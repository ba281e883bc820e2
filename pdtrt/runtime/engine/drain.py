"""Draining one engine model on request: it takes no new requests, finishes those in flight,
then says it is drained (docs/drain.md).

Not the stop of a server (:meth:`pdtrt.runtime.engine.model.TritonPythonModel.drain`, on
SIGTERM), which *ends* the requests in flight with an error: a drain lets them finish, so that
an endpoint can leave its pool (a Kubernetes pod scaled down, a host taken out) without losing a
request. A drain request (:class:`~pdtrt.runtime.request_parsing.DrainRequest`) starts it, ends it
(``resume``) or asks how far it is (``status``); the answer is a :class:`DrainState`.

While it drains, the model answers health probes with :data:`~pdtrt.engine_io.DRAINING`, which
routers read as "alive, but choose it no more" (:mod:`pdtrt.runtime.router.health`), and
refuses new requests with it -- one a router sent before its probe saw the drain is retried on
another endpoint of the pool, nothing of it having reached a client. *Drained* means no request
in flight and no KV held for a decode: a prefill's finished request holds its KV until a decode
pulls it, and the engine is not told when one has, so a prefill is drained at the latest when
``kv_transfer.timeout_s`` has run out after its last request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pdtrt.engine_io import DRAINING

__all__ = ["NOT_ADMITTED", "PROBED", "DrainState"]

NOT_ADMITTED = f"{DRAINING}: it takes no new requests"
PROBED = f"{DRAINING}: it finishes its requests in flight and takes no new ones"


@dataclass(frozen=True, kw_only=True)
class DrainState:
    """One engine model's drain, as its drain request answers it."""

    draining: bool
    num_in_flight: int  # requests without their final response yet
    num_held: int  # finished prefills whose KV a decode may still pull (until its timeout)

    @property
    def drained(self) -> bool:
        return self.draining and self.num_in_flight == 0 and self.num_held == 0

    def to_dict(self) -> dict[str, object]:
        return {"draining": self.draining, "num_in_flight": self.num_in_flight,
                "num_held": self.num_held, "drained": self.drained}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DrainState:
        raw = json.loads(text)
        return cls(draining=bool(raw["draining"]), num_in_flight=int(raw["num_in_flight"]),
                   num_held=int(raw["num_held"]))

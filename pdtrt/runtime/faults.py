"""Fault injection for tests of the failure paths (off unless ``PDTRT_FAULT_INJECTION`` is set).

A real engine fails in ways a CPU test cannot provoke on purpose (an XID, an out-of-memory in
the middle of a batch). To prove that such a failure becomes a request error -- not a hang --
and that the server keeps serving, an operator (or a test) may start the server with::

    PDTRT_FAULT_INJECTION=decode_step:<role>:<request-id prefix>
    PDTRT_FAULT_INJECTION=event_loop:router:<request-id prefix>

``decode_step``: the engine model of that role (``prefill``, ``decode`` or ``aggregated``)
raises :class:`InjectedFault` in its batched decode step whenever the batch holds a sequence
whose request id starts with the prefix -- exactly where a real engine failure would surface.
``event_loop``: the router blocks its own event loop, for good, when a request with such an id
arrives -- a wedged router (a blocking call on the loop, a deadlock), which readiness must see
(:mod:`pdtrt.serve.supervisor`). Several rules are separated by commas. Anything malformed is
refused at model load, loudly.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from pdtrt.envvars import PDTRT_FAULT_INJECTION

__all__ = ["FaultInjection", "InjectedFault"]

_POINTS = ("decode_step", "event_loop")


class InjectedFault(RuntimeError):
    """Raised by an injected fault (PDTRT_FAULT_INJECTION)."""


@dataclass(frozen=True)
class FaultInjection:
    prefixes: tuple[str, ...]  # request-id prefixes whose presence triggers the fault

    @classmethod
    def from_env(cls, role: str, environ: dict[str, str] | None = None, *,
                 point: str = "decode_step") -> FaultInjection | None:
        """The rules of ``point`` for ``role``; None when there are none."""
        raw = (os.environ if environ is None else environ).get(PDTRT_FAULT_INJECTION, "")
        prefixes = []
        for rule in filter(None, (r.strip() for r in raw.split(","))):
            parts = rule.split(":", 2)
            if len(parts) != 3 or parts[0] not in _POINTS or not parts[2]:
                raise ValueError(f"{PDTRT_FAULT_INJECTION}: bad rule {rule!r}; expected "
                                 "decode_step:<role>:<request-id prefix> or "
                                 "event_loop:router:<request-id prefix>")
            if parts[0] == point and parts[1] == role:
                prefixes.append(parts[2])
        return cls(tuple(prefixes)) if prefixes else None

    def hits(self, request_id: str) -> bool:
        return request_id.startswith(self.prefixes)

    def before_decode(self, request_ids: Sequence[str]) -> None:
        hit = [r for r in request_ids if r.startswith(self.prefixes)]
        if hit:
            raise InjectedFault(f"injected decode-step fault ({PDTRT_FAULT_INJECTION}) for "
                                f"request {hit[0]!r}")

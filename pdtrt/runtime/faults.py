"""Fault injection for tests of the failure paths (off unless ``PDTRT_FAULT_INJECTION`` is set).

A real engine fails in ways a CPU test cannot provoke on purpose (an XID, an out-of-memory in
the middle of a batch). To prove that such a failure becomes a request error -- not a hang --
and that the server keeps serving, an operator (or a test) may start the server with::

    PDTRT_FAULT_INJECTION=decode_step:<role>:<request-id prefix>
    PDTRT_FAULT_INJECTION=event_loop:router:<request-id prefix>
    PDTRT_FAULT_INJECTION=kv_transfer:<role or model>:<request-id prefix>
    PDTRT_FAULT_INJECTION=kv_done:<role or model>:<request-id prefix>

``decode_step``: the engine model of that role (``prefill``, ``decode`` or ``aggregated``)
raises :class:`InjectedFault` in its batched decode step whenever the batch holds a sequence
whose request id starts with the prefix -- exactly where a real engine failure would surface.
``event_loop``: the router blocks its own event loop, for good, when a request with such an id
arrives -- a wedged router (a blocking call on the loop, a deadlock), which readiness must see
(:mod:`pdtrt.serve.supervisor`). ``kv_transfer``: the prefill endpoint that holds a matching
request's KV (the reference's KV transceiver) SIGKILLs its own process the moment a decode asks
for that KV -- a prefill that dies *during* the KV transfer. ``kv_done``: that prefill endpoint
answers the pull but drops the transfer's completion (TensorRT-LLM #17665: one lost "done"
notice): the decode never learns the KV arrived, the prefill never learns it was taken and holds
it until ``kv_transfer.timeout_s``. Each of these two fires once per server (the first matching
request's transfer; its retry is served), and its role field names a role or one endpoint's
model (``prefill_b``). Several rules are separated by commas. Anything
malformed is refused at model load, loudly.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pdtrt.envvars import PDTRT_FAULT_INJECTION

__all__ = ["KV_DROP_DONE", "KV_KILL", "FaultInjection", "InjectedFault", "KVTransferFaults",
           "once_per_server"]

_POINTS = ("decode_step", "event_loop", "kv_transfer", "kv_done")
# what the reference KV transceiver does with a transfer (its ``KVFaultHook`` protocol)
KV_KILL = "kill"  # SIGKILL this process when the decode asks for the KV
KV_DROP_DONE = "drop_done"  # answer the pull, drop its completion; the KV stays held


class InjectedFault(RuntimeError):
    """Raised by an injected fault (PDTRT_FAULT_INJECTION)."""


@dataclass(frozen=True)
class FaultInjection:
    prefixes: tuple[str, ...]  # request-id prefixes whose presence triggers the fault

    @classmethod
    def from_env(cls, role: str, environ: dict[str, str] | None = None, *,
                 point: str = "decode_step", model: str = "") -> FaultInjection | None:
        """The rules of ``point`` for ``role`` (or for the model named ``model``); None when
        there are none."""
        raw = (os.environ if environ is None else environ).get(PDTRT_FAULT_INJECTION, "")
        prefixes = []
        for rule in filter(None, (r.strip() for r in raw.split(","))):
            parts = rule.split(":", 2)
            if len(parts) != 3 or parts[0] not in _POINTS or not parts[2]:
                raise ValueError(f"{PDTRT_FAULT_INJECTION}: bad rule {rule!r}; expected "
                                 "decode_step:<role>:<request-id prefix>, "
                                 "event_loop:router:<request-id prefix>, or kv_transfer / "
                                 "kv_done:<role or model>:<request-id prefix>")
            if parts[0] == point and parts[1] in (role, model or role):
                prefixes.append(parts[2])
        return cls(tuple(prefixes)) if prefixes else None

    def hits(self, request_id: str) -> bool:
        return request_id.startswith(self.prefixes)

    def before_decode(self, request_ids: Sequence[str]) -> None:
        hit = [r for r in request_ids if r.startswith(self.prefixes)]
        if hit:
            raise InjectedFault(f"injected decode-step fault ({PDTRT_FAULT_INJECTION}) for "
                                f"request {hit[0]!r}")


class KVTransferFaults:
    """The ``kv_transfer`` and ``kv_done`` rules of one engine process: what the reference KV
    transceiver does with the transfer of a request's KV (asked when it offers the KV). Each
    rule fires once per server (``claim``: :func:`once_per_server`), so a request retried on
    another prefill, or on the reloaded one, is served."""

    def __init__(self, kill: FaultInjection | None, drop_done: FaultInjection | None, *,
                 claim: Callable[[str], bool] | None = None) -> None:
        self.kill, self.drop_done = kill, drop_done
        self.claim = claim or once_per_server

    @classmethod
    def from_env(cls, role: str, model: str, environ: dict[str, str] | None = None
                 ) -> KVTransferFaults | None:
        kill, drop = (FaultInjection.from_env(role, environ, point=p, model=model)
                      for p in ("kv_transfer", "kv_done"))
        return None if kill is None and drop is None else cls(kill, drop)

    def kv_transfer_fault(self, request_id: str) -> str | None:
        """:data:`KV_KILL`, :data:`KV_DROP_DONE` or None (no fault) for the transfer of
        ``request_id``'s KV."""
        for rules, fault in ((self.kill, KV_KILL), (self.drop_done, KV_DROP_DONE)):
            if rules is not None and rules.hits(request_id) and self.claim(fault):
                return fault
        return None


def once_per_server(fault: str) -> bool:
    """True the first time ``fault`` is claimed by a stub of this Triton server (the stub's
    parent process, told apart from a later one with its pid by its start time): a marker
    file in the temp directory, created exclusively."""
    server = os.getppid()
    try:
        started = Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        started = "0"
    marker = Path(tempfile.gettempdir()) / f"pdtrt-fault-{server}-{started}-{fault}"
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True

"""The router's endpoint list: one line of text naming where a phase is served.

An **endpoint** is one place that serves a phase model: a model of this Triton server (called
over BLS) or the model of another Triton server (``MODEL@HOST:PORT``, called over gRPC), with
the number of model instances behind it. ``pdtrt repo`` writes each router pool's endpoints as
one model parameter (:func:`format_endpoints`, from the spec's ``endpoints``); the router and
the supervisor read it back (:func:`parse_endpoints`)::

    decode_endpoints: "decode*2,decode_b,decode@10.0.0.7:8001*4"

Plain text and a frozen dataclass: the writer (the repo stage) and the readers (the router's
stub, the supervisor) share it without either loading the other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["EndpointSpec", "format_endpoints", "parse_endpoints"]

_ITEM = re.compile(r"^(?P<model>[A-Za-z0-9_.\-]+)(?:@(?P<url>[A-Za-z0-9._\-]+:[0-9]{1,5}|"
                   r"\[[0-9A-Fa-f:]+\]:[0-9]{1,5}))?(?:\*(?P<instances>[1-9][0-9]*))?$")


@dataclass(frozen=True, kw_only=True)
class EndpointSpec:
    """One endpoint as the router's parameters name it."""

    model: str  # the phase model's name where it is served
    url: str = ""  # gRPC HOST:PORT of another Triton server; "" = this server (BLS)
    instances: int = 1  # model instances behind it: its share of the load

    @property
    def label(self) -> str:
        """``model`` or ``model@HOST:PORT``: how logs, errors and metrics name it."""
        return f"{self.model}@{self.url}" if self.url else self.model

    @property
    def is_local(self) -> bool:
        return not self.url


def parse_endpoints(text: str) -> tuple[EndpointSpec, ...]:
    """``MODEL[@HOST:PORT][*INSTANCES]``, comma-separated; raises :class:`ValueError` naming
    the item that does not parse, or an endpoint named twice."""
    out: list[EndpointSpec] = []
    for item in filter(None, (i.strip() for i in text.split(","))):
        m = _ITEM.match(item)
        if m is None:
            raise ValueError(f"endpoint {item!r} is not MODEL[@HOST:PORT][*INSTANCES]")
        spec = EndpointSpec(model=m["model"], url=m["url"] or "",
                            instances=int(m["instances"] or 1))
        if any(e.label == spec.label for e in out):
            raise ValueError(f"endpoint {spec.label!r} is named twice")
        out.append(spec)
    return tuple(out)


def format_endpoints(endpoints: Iterable[EndpointSpec]) -> str:
    """The parameter text of ``endpoints`` (what :func:`parse_endpoints` reads back)."""
    return ",".join(e.label + (f"*{e.instances}" if e.instances != 1 else "")
                    for e in endpoints)

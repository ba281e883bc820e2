"""Which :class:`~pdtrt.targets.base.TargetSupport` answers for each :class:`Target`.

The one place that lists the targets pdtrt can deploy to. Adding one: its module under
``pdtrt/targets/`` (and data under ``pdtrt/data/targets/``), its :class:`Target` member, and
its object in :data:`REGISTRY` below -- no stage branches on the target.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pdtrt.enums import Target
from pdtrt.errors import UnsupportedTargetError
from pdtrt.targets.base import TargetSupport
from pdtrt.targets.reference import ReferenceTarget
from pdtrt.targets.trtllm_0_21 import Trtllm021Target
from pdtrt.targets.trtllm_1_2 import Trtllm12Target

__all__ = ["REGISTRY", "TargetRegistry", "target_support"]


class TargetRegistry:
    """Target supports keyed by their :class:`Target`, in registration order."""

    def __init__(self, supports: Iterable[TargetSupport]) -> None:
        self._supports: dict[Target, TargetSupport] = {}
        for support in supports:
            if support.target in self._supports:
                raise ValueError(f"target {support.target} is registered twice")
            self._supports[support.target] = support

    def __iter__(self) -> Iterator[TargetSupport]:
        return iter(self._supports.values())

    def get(self, target: Target) -> TargetSupport:
        """The support of ``target``; raises :class:`UnsupportedTargetError` when it has none."""
        support = self._supports.get(target)
        if support is None:
            known = ", ".join(self._supports)
            raise UnsupportedTargetError(
                f"target {target} is not supported by this pdtrt (supported: {known})",
                hint=f"set target to one of {known}; to add {target}, write its module under "
                "pdtrt/targets/ and register it in pdtrt/targets/registry.py")
        return support

    def missing(self) -> tuple[Target, ...]:
        """The :class:`Target` members without a support (empty in a complete pdtrt)."""
        return tuple(t for t in Target if t not in self._supports)


REGISTRY = TargetRegistry([ReferenceTarget(), Trtllm021Target(), Trtllm12Target()])


def target_support(target: Target) -> TargetSupport:
    """The support of ``target`` in :data:`REGISTRY` (see :meth:`TargetRegistry.get`)."""
    return REGISTRY.get(target)

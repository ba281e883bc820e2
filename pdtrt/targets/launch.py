"""How a repository that pdtrt's embedded server does not serve is started: the launch plan.

A :class:`LaunchPlan` is a container image, the environment every process gets, the host paths
mounted into the container, and the processes themselves -- one MPI world, rank 0 first, each
rank a ``tritonserver`` command. A target that needs one makes it
(:meth:`pdtrt.targets.base.TargetSupport.plan_launch`; trtllm-0.21:
:mod:`pdtrt.targets.trtllm_launch`); the reference target has none (the embedded server,
:mod:`pdtrt.serve`). It is data: the target's launch artifacts (``pdtrt.env``, ``launch.sh``)
and ``pdtrt-repo.json`` format it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LaunchPlan", "RankPlan"]


@dataclass(frozen=True, kw_only=True)
class RankPlan:
    model: str
    participant_ids: tuple[tuple[int, ...], ...]  # per instance: its MPI ranks
    gpu_device_ids: tuple[tuple[int, ...], ...]  # per instance: its local GPU ordinals

    @property
    def participant_ids_param(self) -> str:
        return ";".join(",".join(str(r) for r in inst) for inst in self.participant_ids)

    @property
    def gpu_device_ids_param(self) -> str:
        return ";".join(",".join(str(g) for g in inst) for inst in self.gpu_device_ids)


@dataclass(frozen=True, kw_only=True)
class LaunchPlan:
    world_size: int  # MPI ranks: 1 orchestrator + the engine ranks
    ranks: tuple[RankPlan, ...]
    env: tuple[tuple[str, str], ...]  # written to pdtrt.env, in this order
    image: str
    mounts: tuple[str, ...]  # host paths mounted at the same path in the container
    rank_commands: tuple[str, ...]  # the command of each MPI rank, rank 0 first

    def rank_plan(self, model: str) -> RankPlan:
        return next(r for r in self.ranks if r.model == model)

    def to_manifest(self) -> dict[str, object]:
        """The ``launch`` entry of ``pdtrt-repo.json``."""
        return {"image": self.image, "mpi_world_size": self.world_size, "env": dict(self.env)}

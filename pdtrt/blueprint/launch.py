"""How a repository that pdtrt's embedded server does not serve is started: the launch plan.

A :class:`LaunchPlan` is a container image, the environment every process gets, the host paths
mounted into the container, the hosts, and the processes themselves -- one MPI world, rank 0
first, each rank a ``tritonserver`` command placed on one host. A target that needs one makes it
(:meth:`pdtrt.targets.base.TargetSupport.plan_launch`; trtllm-0.21:
:mod:`pdtrt.targets.trtllm_launch`); the reference target has none (the embedded server,
:mod:`pdtrt.serve`). It is data: the target's launch artifacts (``pdtrt.env``, ``launch.sh``),
``pdtrt-repo.json`` and the CLI's "what each host runs" format it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdtrt import envvars

__all__ = ["HostPlan", "LaunchPlan", "RankPlan", "env_lines", "host_command"]

_PLACEHOLDERS = {envvars.PDTRT_SRC: "/path/to/pdtrt-checkout",
                 envvars.PDTRT_SSH_DIR: "/path/to/ssh-keys"}


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
class HostPlan:
    """One machine of the MPI world: the pools of one GPU type, and the ranks placed on it."""

    gpu: str  # catalog key of its GPUs; one host per GPU type
    host_var: str  # the launch.sh variable of its address (PDTRT_HOST_<GPU>; "" on one host)
    interface_var: str  # the launch.sh variable naming its NIC for TRTLLM_UCX_INTERFACE
    ranks: tuple[int, ...]
    models: tuple[str, ...]  # the engine models with ranks here, in rank order
    num_gpus: int  # GPUs its ranks use (ordinals 0 .. num_gpus-1)
    launcher: bool  # holds rank 0 (the orchestrator) and runs mpirun
    server: bool = False  # one Triton server of its own, no MPI (trtllm-1.2's pools)
    interface: str = ""  # the NIC launch.sh names unless interface_var says otherwise
    interface_required: bool = False  # the KV crosses hosts: launch.sh refuses to start without

    @property
    def run_args(self) -> tuple[str, ...]:
        """``launch.sh``'s arguments on this host (the other hosts wait for mpirun)."""
        return () if self.launcher else ("--worker",)

    @property
    def summary(self) -> str:
        """``l40s host (PDTRT_HOST_L40S): ranks 2,3 -- decode; 2 GPU(s); waits for mpirun``"""
        var = f" ({self.host_var})" if self.host_var else ""
        if self.server:
            return (f"{self.gpu} host{var}: one Triton server -- {', '.join(self.models)}; "
                    f"{self.num_gpus} GPU(s)")
        roles = (["orchestrator"] if self.launcher else []) + list(self.models)
        what = "runs mpirun" if self.launcher else "waits for mpirun (sshd)"
        return (f"{self.gpu} host{var}: ranks {','.join(map(str, self.ranks))} "
                f"-- {', '.join(roles)}; {self.num_gpus} GPU(s); {what}")


@dataclass(frozen=True, kw_only=True)
class LaunchPlan:
    world_size: int  # MPI ranks: 1 orchestrator + the engine ranks
    ranks: tuple[RankPlan, ...]
    env: tuple[tuple[str, str], ...]  # written to pdtrt.env, in this order
    image: str
    mounts: tuple[str, ...]  # host paths mounted at the same path in the launcher's container
    worker_mounts: tuple[str, ...]  # ... in the other hosts' containers (the engines)
    hosts: tuple[HostPlan, ...]  # the launcher first
    rank_hosts: tuple[int, ...]  # per rank: index into ``hosts``
    rank_commands: tuple[str, ...]  # the command of each MPI rank, rank 0 first
    forwarded_env: tuple[str, ...]  # passed to every rank by mpirun (-x)
    launcher_env: tuple[str, ...]  # variables the launcher host sets when it runs launch.sh
    worker_env: tuple[str, ...]  # ... and the other hosts
    env_reasons: tuple[tuple[str, str], ...] = ()  # why a variable of ``env`` has its value

    @property
    def mpi(self) -> bool:
        """Whether the hosts form one MPI world (else each runs its own Triton server)."""
        return not all(h.server for h in self.hosts)

    @property
    def multi_host(self) -> bool:
        return len(self.hosts) > 1

    @property
    def start_order(self) -> tuple[HostPlan, ...]:
        """The hosts in the order they start: those waiting for mpirun first."""
        return tuple(h for h in self.hosts if not h.launcher) + self.hosts[:1]

    def rank_plan(self, model: str) -> RankPlan:
        return next(r for r in self.ranks if r.model == model)

    def host_env(self, host: HostPlan) -> tuple[str, ...]:
        """The variables ``host`` sets before running ``launch.sh``."""
        return self.launcher_env if host.launcher else self.worker_env

    def to_manifest(self) -> dict[str, object]:
        """The ``launch`` entry of ``pdtrt-repo.json``."""
        return {"image": self.image, "mpi_world_size": self.world_size, "env": dict(self.env),
                "hosts": [{"gpu": h.gpu, "address_variable": h.host_var,
                           "ucx_interface_variable": h.interface_var, "ranks": list(h.ranks),
                           "models": list(h.models), "gpus": h.num_gpus,
                           "launcher": h.launcher, "run": ["launch.sh", *h.run_args],
                           "set": list(self.host_env(h))}
                          for h in self.hosts]}


def host_command(plan: LaunchPlan, host: HostPlan, script: str = "./launch.sh") -> str:
    """The command line ``host`` runs to start its part of the world (values as placeholders:
    ``PDTRT_HOST_L40S=<l40s address>``)."""
    addresses = {h.host_var: f"<{h.gpu} address>" for h in plan.hosts}
    values = [f"{name}={_PLACEHOLDERS.get(name) or addresses[name]}"
              for name in plan.host_env(host)]
    return " ".join([*values, script, *host.run_args])


def env_lines(plan: LaunchPlan) -> list[str]:
    """``pdtrt.env``'s lines: each variable, after the comment that says why when there is one
    (docker's ``--env-file`` skips ``#`` lines)."""
    reasons = dict(plan.env_reasons)
    lines = []
    for key, value in plan.env:
        if key in reasons:
            lines.append(f"# {reasons[key]}")
        lines.append(f"{key}={value}")
    return lines

"""``pdtrt repo``: generate a Triton model repository from a deployment (library entry point).

:func:`generate_repo` plans (:mod:`pdtrt.repo.plan`), renders and schema-checks
(:mod:`pdtrt.repo.render`) and writes atomically (:mod:`pdtrt.repo.write`); it returns a
:class:`RepoResult` for the CLI to render. Validation of any repository is
:mod:`pdtrt.repo.validate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.manifest import DEFAULT_ENGINES_ROOT
from pdtrt.blueprint.triton_models import RepoMode, RepoPlan
from pdtrt.repo.plan import plan_repo
from pdtrt.repo.render import render_repo
from pdtrt.repo.write import check_writable, write_tree

__all__ = ["RepoMode", "RepoResult", "generate_repo"]


@dataclass(frozen=True, kw_only=True)
class RepoResult:
    out: Path
    plan: RepoPlan
    files: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        plan = self.plan
        data: dict[str, object] = {
            "out": str(self.out),
            "target": str(plan.target),
            "mode": str(plan.mode),
            "models": [str(m.name) for m in plan.models] + [str(e.name) for e in plan.ensembles],
            "engine_dirs": {str(k): str(v) for k, v in plan.engine_dirs.items()},
            "remote_pools": {str(k): v for k, v in plan.remote.items()},
            "limits": {str(p): lim.to_dict() for p, lim in plan.limits.items()},
            "files": list(self.files),
        }
        if plan.launch is not None:
            data["mpi_world_size"] = plan.launch.world_size
        return data


def generate_repo(dep: Deployment, out: Path, *, mode: RepoMode = RepoMode.DISAGGREGATED,
                  engines_root: Path = DEFAULT_ENGINES_ROOT, force: bool = False) -> RepoResult:
    """Write the repository of ``dep`` to ``out``; raises :class:`pdtrt.errors.RepoError`."""
    check_writable(out, force=force)
    plan = plan_repo(dep, mode=mode, engines_root=engines_root)
    rendered = render_repo(dep, plan)
    write_tree(out, rendered.files, dirs=rendered.dirs, executables=rendered.executables,
               force=force)
    return RepoResult(out=out, plan=plan, files=tuple(rendered.files))

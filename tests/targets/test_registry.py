"""Targets behind one interface: every Target registered, every question answered, and the
planners asking the target instead of branching on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdtrt.blueprint.deployment import Deployment
from pdtrt.blueprint.launch import LaunchPlan
from pdtrt.blueprint.limits import EngineDefaults, resolve_limits
from pdtrt.blueprint.manifest import EngineLayout
from pdtrt.blueprint.spec import DeploymentSpec
from pdtrt.blueprint.triton_models import EngineUse, RepoMode, TemplateFile
from pdtrt.builder.plan import plan_build
from pdtrt.engine_io import CORE_ENGINE_IO, ModelName, Param, Role
from pdtrt.ensemble import engine_input_name, engine_io
from pdtrt.enums import Phase, Target
from pdtrt.errors import UnsupportedTargetError
from pdtrt.repo.plan import plan_repo
from pdtrt.spec.load import load_deployment, parse_spec
from pdtrt.targets import registry
from pdtrt.targets.base import BuildContext, BuildSource, PhaseBuild, TargetSupport
from pdtrt.targets.reference import ReferenceTarget
from pdtrt.targets.registry import REGISTRY, TargetRegistry, target_support
from tests.conftest import EXAMPLES

EXAMPLE_OF = {Target.REFERENCE: "reference-cpu",
              Target.TRTLLM_0_21: "llama3-8b-h100-l40s-trtllm-0.21",
              Target.TRTLLM_1_2: "llama3-8b-h100-l40s"}
SUPPORTS = list(REGISTRY)
IDS = [str(s.target) for s in SUPPORTS]


@pytest.fixture(scope="module")
def deployments() -> dict[Target, Deployment]:
    return {t: load_deployment(EXAMPLES / f"{name}.yaml") for t, name in EXAMPLE_OF.items()}


def test_every_target_is_registered_once():
    assert REGISTRY.missing() == ()
    assert sorted(s.target for s in SUPPORTS) == sorted(Target)
    assert set(EXAMPLE_OF) == set(Target), "give each target an example spec for the tests"
    for target in Target:
        assert target_support(target).target is target


def test_the_interface_cannot_be_half_implemented():
    class Half(TargetSupport):
        target = Target.REFERENCE
        needs_gpu = False

    with pytest.raises(TypeError, match="abstract") as err:
        Half()  # type: ignore[abstract]
    assert "plan_phase" in str(err.value) and "engine_model" in str(err.value)
    assert {"spec_issues", "build_source", "plan_phase", "prepare_host", "run_in_process",
            "step_inputs", "tokenizer_dir", "plan_launch", "engine_model",
            "launch_files"} <= TargetSupport.__abstractmethods__


def test_an_unregistered_target_is_a_clear_error():
    partial = TargetRegistry([ReferenceTarget()])
    assert partial.missing() == (Target.TRTLLM_0_21, Target.TRTLLM_1_2)
    with pytest.raises(UnsupportedTargetError) as err:
        partial.get(Target.TRTLLM_0_21)
    assert err.value.message == ("target trtllm-0.21 is not supported by this pdtrt "
                                 "(supported: reference)")
    assert "pdtrt/targets/registry.py" in (err.value.hint or "")
    with pytest.raises(ValueError, match="registered twice"):
        TargetRegistry([ReferenceTarget(), ReferenceTarget()])


def test_a_spec_for_an_unregistered_target_fails_at_the_edge(monkeypatch):
    monkeypatch.setattr(registry, "REGISTRY", TargetRegistry([ReferenceTarget()]))
    with pytest.raises(UnsupportedTargetError, match="target trtllm-0.21 is not supported"):
        parse_spec((EXAMPLES / f"{EXAMPLE_OF[Target.TRTLLM_0_21]}.yaml").read_text())


@pytest.mark.parametrize("support", SUPPORTS, ids=IDS)
def test_spec_and_limit_answers(support: TargetSupport, deployments):
    spec = deployments[support.target].spec
    assert isinstance(support.needs_gpu, bool)
    assert isinstance(support.supports_remote_pools, bool)
    assert list(support.spec_issues(spec)) == []  # its own example follows its rules
    assert isinstance(support.engine_defaults, EngineDefaults)


@pytest.mark.parametrize("support", SUPPORTS, ids=IDS)
def test_build_answers(support: TargetSupport, deployments, tmp_path):
    dep = deployments[support.target]
    plan = plan_build(dep, engines_root=tmp_path)
    ctx = BuildContext(dep=dep, layout=EngineLayout(tmp_path, dep.spec.name),
                       chosen={ph.phase: ph.settings for ph in plan.phases})
    source = support.build_source(ctx)
    assert isinstance(source, BuildSource)
    assert all(step.phase is None for step in source.steps)  # shared by both phases
    for ph in plan.phases:
        built = support.plan_phase(ctx, ph.phase, ph.settings)
        assert isinstance(built, PhaseBuild) and built.steps
        assert all(step.phase is ph.phase for step in built.steps)
        assert built.steps[-1].output_dir == ctx.layout.phase_dir(ph.phase)
        switches = [n for n in ph.settings.values if n in support.build_switches]
        assert switches == list(support.build_switches)
    for step in plan.steps:
        assert isinstance(support.step_inputs(step, dep), dict)
    assert plan.container == support.container_image


@pytest.mark.parametrize("support", SUPPORTS, ids=IDS)
def test_repository_answers(support: TargetSupport, deployments, tmp_path):
    dep = deployments[support.target]
    assert support.engine_io is engine_io(support.target)  # the contract table of engine_io.py
    assert {engine_input_name(support.target, n) for n in CORE_ENGINE_IO.input_names} <= set(
        support.engine_io.input_names)
    layout = EngineLayout(tmp_path, dep.spec.name)
    # a pool in another server is in another repository (trtllm-1.2: one server per host)
    engines = [EngineUse(model=ModelName(str(p)), role=Role.serving(p), phase=p,
                         engine_dir=layout.phase_dir(p), limits=resolve_limits(
                             dep, p, None, defaults=support.engine_defaults)) for p in Phase
               if not (support.supports_remote_pools and dep.spec.pool(p).endpoint)]
    tokenizer_dir = support.tokenizer_dir(dep, layout)
    launch = support.plan_launch(dep, engines, layout=layout, tokenizer_dir=tokenizer_dir)
    assert launch is None or isinstance(launch, LaunchPlan)
    for engine in engines:
        model = support.engine_model(dep, engine, launch=launch)
        assert (model.name, model.backend, model.io) == (engine.model, support.engine_backend,
                                                         support.engine_io)
        assert model.decoupled == support.engine_decoupled(dep.spec)
        assert model.max_batch_size == engine.limits.max_batch_size
    files = support.launch_files(dep, launch) if launch is not None else ()
    assert all(isinstance(f, TemplateFile) for f in files)


class _Variant(ReferenceTarget):
    """The reference target with other answers: the planners must follow them."""

    engine_error_output = "variant_error"

    def engine_decoupled(self, spec: DeploymentSpec) -> bool:
        return False

    def build_source(self, ctx: BuildContext) -> BuildSource:
        source = super().build_source(ctx)
        return BuildSource(model_dir=Path("/variant"), notes=("variant note",),
                           steps=source.steps)


def test_the_planners_ask_the_target(monkeypatch, deployments, tmp_path):
    monkeypatch.setattr(registry, "REGISTRY", TargetRegistry([_Variant()]))
    dep = deployments[Target.REFERENCE]
    plan = plan_repo(dep, mode=RepoMode.BOTH, engines_root=tmp_path)
    router = next(m for m in plan.models if m.name == ModelName.ROUTER)
    assert dict(router.parameters)[Param.ERROR_OUTPUT] == "variant_error"
    assert not any(m.decoupled for m in plan.models)
    build = plan_build(dep, engines_root=tmp_path)
    assert (build.notes, build.model_dir) == (("variant note",), Path("/variant"))

"""The two example deployments and their generated objects, built once per session."""

from __future__ import annotations

import copy

import pytest

from pdtrt.deploy.generate import build_files
from pdtrt.deploy.plan import DeployOptions, plan_deploy
from tests.conftest import EXAMPLES

EXAMPLE_NAMES = ("llama3-8b-h100-l40s-trtllm-0.21", "reference-cpu")


@pytest.fixture(scope="session")
def deps():
    """example name -> its Deployment."""
    from pdtrt.spec.load import load_deployment

    return {name: load_deployment(EXAMPLES / f"{name}.yaml") for name in EXAMPLE_NAMES}


@pytest.fixture(scope="session")
def built(deps):
    """example name -> (files, objects) of its default plan (do not mutate: use ``objects``)."""
    return {name: build_files(plan_deploy(dep, DeployOptions())) for name, dep in deps.items()}


@pytest.fixture
def objects(built):
    """``objects(example)``: a fresh deep copy of the example's generated objects."""
    return lambda name: copy.deepcopy(built[name][1])


def find(objs, kind: str, name: str):
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)

"""The typed blueprint of a deployment, shared by the stages and the targets.

The spec as written (:mod:`~pdtrt.blueprint.spec`) and resolved against the catalog
(:mod:`~pdtrt.blueprint.deployment`), each phase's engine settings with their reasons
(:mod:`~pdtrt.blueprint.settings`, :mod:`~pdtrt.blueprint.profiles`), the build steps and the
engine layout with its manifests (:mod:`~pdtrt.blueprint.steps`,
:mod:`~pdtrt.blueprint.manifest`), and the Triton models, limits and launch plan of a
repository (:mod:`~pdtrt.blueprint.triton_models`, :mod:`~pdtrt.blueprint.limits`,
:mod:`~pdtrt.blueprint.launch`). Values only: nothing here looks a target up, so the targets
build on it and the stages' drivers (:mod:`pdtrt.spec`, :mod:`pdtrt.builder`,
:mod:`pdtrt.repo`) sit above both.
"""

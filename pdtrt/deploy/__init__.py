"""``pdtrt deploy``: Kubernetes as the engine that runs a deployment's pools.

From one spec, :func:`pdtrt.deploy.generate.generate_k8s` writes a Kustomize base: one workload
per pod role (the *front* -- ensemble, pre/postprocessing and router -- and one per pool, each
pool pinned to its GPU type), the Services between them, disruption budgets, an autoscaler per
pool, a PodMonitor, a Grafana dashboard and the prometheus-adapter rules the autoscalers read.
Every object is a plain dict built from typed plans, checked offline and written atomically
and deterministically. What the pods run is pdtrt itself: each generates its Triton repository
from its role's spec at start (``pdtrt repo``), then serves it (``pdtrt serve`` or the target's
launch script). docs/deploy.md is the user's guide.

The rooms, in the order a generation passes through them:

- :mod:`~pdtrt.deploy.names` -- object names and labels; :mod:`~pdtrt.deploy.layout` -- paths
  and ports inside a pod; :mod:`~pdtrt.deploy.roles` -- the spec each pod role serves;
- :mod:`~pdtrt.deploy.plan` -- what each role runs, on which image and nodes, how many;
  :mod:`~pdtrt.deploy.resources`, :mod:`~pdtrt.deploy.network`, :mod:`~pdtrt.deploy.probes`;
- objects: :mod:`~pdtrt.deploy.k8s` (workloads, Services, budgets), :mod:`~pdtrt.deploy.autoscale`,
  :mod:`~pdtrt.deploy.monitoring`, :mod:`~pdtrt.deploy.dashboard` over
  :mod:`~pdtrt.deploy.metrics` (the names the deployment exports);
- checks: :mod:`~pdtrt.deploy.validate` (schema, names) with :mod:`~pdtrt.deploy.crd` (custom
  resources) and :mod:`~pdtrt.deploy.references` (between objects), :mod:`~pdtrt.deploy.problems`;
- output: :mod:`~pdtrt.deploy.render` (YAML in and out), :mod:`~pdtrt.deploy.generate`.
"""

"""The deployment spec (``pdtrt.yaml``): loading with line-numbered errors, the cross-field and
pool rules (asking the target), into :class:`~pdtrt.blueprint.deployment.Deployment`; the
schema itself is :mod:`pdtrt.blueprint.spec`."""

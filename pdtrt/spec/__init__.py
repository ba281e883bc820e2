"""The deployment spec (``pdtrt.yaml``): its shape, loading with line-numbered errors,
cross-field rules, and the resolved :class:`~pdtrt.spec.deployment.Deployment`."""

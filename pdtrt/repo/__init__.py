"""The Triton model repository: planning every model's config (asking the target), rendering
through Triton's schema, atomic writing, and validation of any repository (``pdtrt repo``);
the model plans, limits and launch plans are in :mod:`pdtrt.blueprint`."""

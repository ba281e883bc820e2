"""The Triton model repository: planning every model's config, rendering through Triton's
schema, atomic writing, and validation of any repository (``pdtrt repo``)."""

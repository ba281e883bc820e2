"""The LLM-API engine model and what only it uses; see :mod:`pdtrt.runtime`."""

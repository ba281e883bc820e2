"""Serving a repository on a real Triton server: the launcher (``pdtrt serve``/``stop``), the
embedded ``tritonserver`` binary, the server process and its recorded state."""

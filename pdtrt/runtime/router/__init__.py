"""The router BLS model and what only it uses; see :mod:`pdtrt.runtime`."""

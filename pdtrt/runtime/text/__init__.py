"""Pre- and postprocessing: text to token ids and back; see :mod:`pdtrt.runtime`."""

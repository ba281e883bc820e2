"""Facts pdtrt reasons with: the GPU catalog, local GPUs (NVML), model facts from
``config.json``, memory fit, and what this machine can do (``pdtrt doctor``)."""

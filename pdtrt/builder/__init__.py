"""Engine builds: the per-phase step plan (asking the target), running it, and the
compatibility check of built engines; settings, steps and manifests are in
:mod:`pdtrt.blueprint`."""

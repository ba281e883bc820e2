"""Engine builds: the per-phase plan, settings and profiles, running it, manifests, and the
compatibility check of built engines."""

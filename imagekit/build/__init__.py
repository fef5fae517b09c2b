"""Building: the plan, BuildKit runs, contexts, inputs, base images, in-build helpers."""

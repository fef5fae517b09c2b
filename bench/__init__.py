"""Benchmarks of imagekit, each run from the repository root as `python -m bench.<name>`."""

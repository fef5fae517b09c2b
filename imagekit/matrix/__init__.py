"""The matrix: envs/*.yaml loaded and validated, compatibility data, cells."""

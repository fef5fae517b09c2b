"""imagekit: a declarative CUDA x PyTorch x Python image matrix, rendered, built and proven.

This module stays import-light: the self-check copies the package into images that have
only the standard library and torch.
"""

__version__ = "0.1.0"

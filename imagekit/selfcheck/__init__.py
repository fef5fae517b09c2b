"""The in-image self-check. Standard library only at import time: it runs inside images."""

"""The in-image self-check, in rooms by role: verdicts/ (pure decisions) below readers/ below
probes/ below run/, each importing only the rooms below it and contract/. Standard library
only at import time: it runs inside images. The doors at the top (__main__, nodes_check,
failures) are the module names the host, torchrun and launch files call."""

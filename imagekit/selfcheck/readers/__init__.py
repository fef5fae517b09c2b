"""Readers: what the container shows (NVML, NUMA, /proc, device nodes, the image's labels, NCCL's
log), read softly (a reading that cannot be taken is left out with its reason), and the host
snapshot assembled from them."""

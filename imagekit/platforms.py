"""The platforms imagekit builds images for, as BuildKit and the OCI image index name them."""

AMD64 = "linux/amd64"
ARM64 = "linux/arm64"
PLATFORMS = (AMD64, ARM64)  # every list of them is kept in this order

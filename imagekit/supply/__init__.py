"""Supply chain: SBOM, provenance and the signed self-check attestation."""

"""Refresh a vendored schema: the openAPIV3Schema of a CRD's served version, descriptions left
out (they are most of the bytes and validate nothing), keys sorted. See SOURCE.md.

    python tests/schemas/vendor.py CRD.yaml VERSION > tests/schemas/NAME.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml


def strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def main(path: str, version: str) -> None:
    with open(path, encoding="utf-8") as fh:
        crd = yaml.safe_load(fh)
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = strip(served["schema"]["openAPIV3Schema"])
    json.dump(schema, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:])

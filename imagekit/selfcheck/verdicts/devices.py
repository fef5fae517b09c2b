"""Is a GPU expected here, if torch sees none why, and which GPU is which? Pure functions
over plain data: readers/container.py reads the container (device nodes, the driver's /proc file,
the IMEX channels, the environment) into `Host`; the decisions never touch the system.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagekit.contract import labels as label
from imagekit.contract.driver import driver_problem
from imagekit.contract.host_snapshot import Gpu
from imagekit.contract.records import given, or_none


@dataclass(frozen=True)
class Host:
    """What the container shows of NVIDIA hardware, read before torch is asked."""

    device_nodes: tuple[str, ...]  # /dev/nvidia0, /dev/nvidia1, ... (not nvidiactl, uvm)
    proc_driver: bool  # /proc/driver/nvidia/version exists
    driver: str | None  # its version, e.g. "580.159.04"
    visible_devices: str | None  # $NVIDIA_VISIBLE_DEVICES
    gpus_requested: bool  # `imagekit test` passed GPUs ($IMAGEKIT_GPUS is all or N)
    cuda_visible_devices: str | None = None  # $CUDA_VISIBLE_DEVICES: what torch may use
    cuda_device_order: str | None = None  # $CUDA_DEVICE_ORDER: how CUDA numbers them
    # /dev/nvidia-caps-imex-channels/*: what multi-node NVLink shares memory through; None
    # where the folder is there but cannot be listed
    imex_channels: tuple[str, ...] | None = ()


def is_cuda_image(labels: Mapping[str, str], torch_cuda: str | None) -> bool:
    """A CUDA image by its label; without labels (run natively), by the torch build."""
    cuda = labels.get(label.CUDA)
    if cuda is not None:
        return cuda not in ("", "cpu")
    return bool(torch_cuda)


def gpu_expected(host: Host, cuda_image: bool) -> bool:
    """A CUDA image in a container that has NVIDIA devices (or was given GPUs) must use them."""
    return cuda_image and (bool(host.device_nodes) or host.proc_driver or host.gpus_requested)


def no_gpu_cause(host: Host, need_driver: str | None, torch_cuda: str | None, warning: str) -> str:
    """Why torch sees no GPU in a container where one is expected: the likeliest cause first."""
    visible = (host.visible_devices or "").strip().lower()
    if visible in ("void", "none"):
        return (
            f"NVIDIA_VISIBLE_DEVICES={host.visible_devices} hides every GPU from this "
            "container: unset it or name the GPUs (e.g. all)"
        )
    if not host.device_nodes and not host.proc_driver:
        return (
            "GPUs were requested, but the container has no /dev/nvidia* devices: the engine "
            "has no working NVIDIA runtime (install nvidia-container-toolkit and run with "
            "--gpus all, or --runtime nvidia)"
        )
    too_old = driver_problem(host.driver, need_driver, torch_cuda)
    if too_old:
        return too_old
    seen = f" torch said: {warning}" if warning else ""
    return (
        f"the container has {', '.join(host.device_nodes) or 'the NVIDIA driver'} (driver "
        f"{host.driver or 'unknown'}), but torch (CUDA {torch_cuda}) sees no GPU.{seen} "
        "Check NVIDIA_VISIBLE_DEVICES, the device cgroup and `nvidia-smi` in the container"
    )


# -- which GPU is which: CUDA_VISIBLE_DEVICES, torch's devices, NVML's GPUs ------------------
#
# NVML numbers every GPU of the container by PCI bus. CUDA numbers only the GPUs that
# $CUDA_VISIBLE_DEVICES names, in the order it names them, and the rest fastest first unless
# CUDA_DEVICE_ORDER=PCI_BUS_ID. The device UUID is the one name both sides share: torch's
# device i is matched to NVML's GPU by it, never by position where the UUID is known.

PCI_ORDER = "PCI_BUS_ID"
_UUID_HEX = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_LEADING_INT = re.compile(r"[+-]?\d+")


def uuid_key(value: object) -> str | None:
    """A device UUID as lowercase 8-4-4-4-12 hex from any of its spellings: NVML's
    "GPU-<uuid>" and "MIG-<uuid>", torch's `get_device_properties(i).uuid` (a _CUuuid whose
    str() has no prefix and whose `.bytes` are 16 ints), a uuid.UUID, 16 raw bytes. None for
    anything else, the legacy "MIG-GPU-<uuid>/<gi>/<ci>" too (it names a slice by its GPU)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return _uuid_from_bytes(value)
    try:
        text = str(value).strip().lower()
    except Exception:
        text = ""
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
            break
    if _UUID_HEX.fullmatch(text):
        return text
    raw = getattr(value, "bytes", None)
    return None if raw is None else _uuid_from_bytes(raw)


def _uuid_from_bytes(raw: object) -> str | None:
    try:
        data = bytes(raw)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    if len(data) != 16:
        return None
    h = data.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def parse_visible(value: str | None) -> list[int | str] | None:
    """$CUDA_VISIBLE_DEVICES as CUDA reads it, by the rules torch.cuda._parse_visible_devices
    models (its tests are the table): None when unset (every GPU), else the entries in order
    up to the first invalid one, where CUDA stops. Indices are an entry's leading digits
    ("1gpu2" is 1; a negative or digit-less entry is invalid). A value that starts with GPU-
    or MIG- lists UUIDs, whole or a prefix that fits one GPU ("GPU-8932f937"), "MIG-<uuid>"
    or the legacy "MIG-GPU-<uuid>/<gi>/<ci>"; an entry without that prefix ends it. "" names
    no GPU; an entry given twice empties the list."""
    if value is None:
        return None
    out: list[int | str] = []
    if value.startswith(("GPU-", "MIG-")):
        for item in (part.strip() for part in value.split(",")):
            if item in out:
                return []
            if not item.startswith(value[:4]):
                break
            out.append(item)
        return out
    for part in value.split(","):
        found = _LEADING_INT.match(part.strip())
        index = int(found.group()) if found else -1
        if index in out:
            return []
        if index < 0:
            break
        out.append(index)
    return out


def resolve_visible(entries: Sequence[int | str], gpus: Sequence[Gpu]) -> list[int]:
    """The NVML indices of the GPUs `entries` (parse_visible's) name, in CUDA's order, up to
    the first entry that names no GPU of this container (CUDA stops there: an index past the
    last GPU, a UUID prefix that fits none or several). A MIG entry names the GPU it is a
    slice of. An index entry is NVML's index only under CUDA_DEVICE_ORDER=PCI_BUS_ID: the
    caller checks that."""
    indices = {or_none(g.index) for g in gpus}
    out: list[int] = []
    for entry in entries:
        found = _gpu_named(entry, gpus) if isinstance(entry, str) else _index_in(entry, indices)
        if found is None:
            break
        if found in out:
            return []
        out.append(found)
    return out


def _index_in(entry: int, indices: set[Any]) -> int | None:
    return entry if entry in indices else None


def _gpu_named(entry: str, gpus: Sequence[Gpu]) -> int | None:
    if entry.startswith("MIG-GPU-"):  # legacy (R450/R460): MIG-GPU-<uuid>/<gi>/<ci>
        parent = entry[len("MIG-") :].split("/")[0]
        hits = [g.index for g in gpus if g.uuid == parent]
    elif entry.startswith("MIG-"):
        hits = [g.index for g in gpus for mig in g.mig_uuids or [] if str(mig).startswith(entry)]
    else:
        hits = [g.index for g in gpus if str(g.uuid or "").startswith(entry)]
    return int(hits[0]) if len(hits) == 1 else None


@dataclass(frozen=True)
class Match:
    """Which NVML GPU torch's device `torch_index` is: NVML's `index` and `uuid` (the whole
    GPU's, for a MIG slice too), and `by`: "uuid"; "order" (torch gave no UUID: the GPU at
    the device's position in CUDA_VISIBLE_DEVICES, or in the PCI bus order when it is
    unset); "torch" (NVML read no GPU: numbered as torch numbers them). Or none, and why."""

    torch_index: int
    index: int | None = None
    uuid: str | None = None
    by: str = ""
    reason: str = ""


def match_devices(
    torch_uuids: Sequence[object],
    gpus: Sequence[Mapping[str, Any]],
    visible: str | None = None,
    order: str | None = None,
    nvml_reason: str = "",
) -> list[Match]:
    """Each torch device's NVML GPU (`torch_uuids[i]`: device i's UUID as torch gives it, or
    None): by UUID where there is one, else by position. A device that matches no GPU, or a
    GPU an earlier device took, stays unmatched with the reason: its readings are never put
    on another GPU. `gpus` are NVML's readings as its readers give them (they always parse)."""
    if not gpus:
        return [Match(i, i, None, "torch") for i in range(len(torch_uuids))]
    return _matched(torch_uuids, [Gpu.from_json(g) for g in gpus], visible, order, nvml_reason)


def _matched(
    torch_uuids: Sequence[object],
    gpus: Sequence[Gpu],
    visible: str | None,
    order: str | None,
    nvml_reason: str,
) -> list[Match]:
    by_index = {int(g.index): g for g in gpus}
    positions, position_why = _by_position(gpus, visible, order)
    out: list[Match] = []
    taken: dict[int, int] = {}
    for i, raw in enumerate(torch_uuids):
        key = uuid_key(raw)
        if key is not None:
            found, why, by = *_by_uuid(key, gpus, nvml_reason), "uuid"
        elif i < len(positions):
            found, why, by = positions[i], "", "order"
        else:
            found, why, by = None, position_why, "order"
        if found is not None and found in taken:
            found, why = None, f"NVML's GPU {found} is torch's device {taken[found]} already"
        if found is None:
            out.append(Match(i, reason=why))
            continue
        taken[found] = i
        out.append(Match(i, found, or_none(by_index[found].uuid), by))
    return out


def _by_uuid(key: str, gpus: Sequence[Gpu], nvml_reason: str) -> tuple[int | None, str]:
    hits = [
        int(g.index)
        for g in gpus
        if uuid_key(or_none(g.uuid)) == key or key in {uuid_key(mig) for mig in g.mig_uuids or []}
    ]
    if len(hits) == 1:
        return hits[0], ""
    if hits:
        return None, f"UUID {key} fits NVML's GPUs {', '.join(map(str, hits))}"
    seen = ", ".join(f"{g.index} {g.uuid}" for g in gpus if g.uuid)
    why = [f"UUID {key} is none of the GPUs NVML read ({seen or 'no UUID read'})"]
    for g in gpus:
        unread: Mapping[str, str] = g.unread or {}
        if not given(g.uuid):
            said = unread.get("uuid") or unread.get("handle") or "not read"
            why.append(f"NVML did not read GPU {g.index}'s UUID: {said}")
        elif g.mig_mode and not given(g.mig_uuids):
            said = unread.get("mig_uuids") or "not read"
            why.append(f"NVML did not read GPU {g.index}'s MIG devices: {said}")
    if nvml_reason:
        why.append(nvml_reason)
    return None, "; ".join(why)


def _by_position(
    gpus: Sequence[Gpu], visible: str | None, order: str | None
) -> tuple[list[int], str]:
    """The fallback for a torch that gives no UUID: NVML's indices in CUDA's order, and why
    a device past their end (or every device) has none."""
    entries = parse_visible(visible)
    indices = sorted(int(g.index) for g in gpus)
    cuda_order = order == PCI_ORDER or len(indices) < 2
    if entries is None:
        if not cuda_order:
            return [], (
                f"torch gave no device UUID, and with CUDA_DEVICE_ORDER={order or '(unset)'} "
                "CUDA numbers the GPUs fastest first, not in NVML's (PCI bus) order"
            )
        return indices, "torch gave no device UUID, and NVML read fewer GPUs than torch sees"
    if not cuda_order and any(isinstance(e, int) for e in entries):
        return [], (
            f"torch gave no device UUID, and the indices of CUDA_VISIBLE_DEVICES={visible} "
            f"follow CUDA_DEVICE_ORDER={order or '(unset)'}, not NVML's order"
        )
    resolved = resolve_visible(entries, gpus)
    return resolved, (
        f"torch gave no device UUID, and CUDA_VISIBLE_DEVICES={visible} names "
        f"{len(resolved)} GPU(s) NVML read"
    )

#!/usr/bin/env bash
# The self-check on a GPU machine, as one command (docs/selfcheck-gpu.md):
#
#   bash scripts/gpu-selfcheck.sh [OUTDIR]        # default docs/gpu-runs/<date>-<gpu>
#
# For a machine with NVIDIA GPUs, a driver, PyTorch with CUDA and nvidia-ml-py, and no
# Docker (a borrowed GPU): it installs imagekit into a venv that sees the machine's own torch
# and pynvml (no network needed), counts the GPUs the way MIG cannot fool, runs
# `python -m imagekit.selfcheck` natively with --snapshot, judges the snapshot again with
# --judge (it must print the same table), and writes everything under OUTDIR:
#   host.txt       the machine: date, commit, nvidia-smi's GPUs, torch and its CUDA, NCCL
#   table.txt      the self-check's table, as printed
#   run.log        its progress lines (stderr), and the script's own notes
#   snapshot.json  the host snapshot (docs/host-snapshot.md)
#   selfcheck.json, selfcheck.xml   the report, JSON and JUnit
#   judged.txt     the table printed by --judge snapshot.json
#   host-copy-wake.json  host-to-device fresh, right after a large free, 0.5 s later, and
#                  settled both ways as the perf probe times them (scripts/host-copy-wake.py)
# Exit: the self-check's own (0 passed, 1 a check failed, 2 could not run), or 3 when the
# re-judged table differs from the live one. Every step is bounded by a timeout.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
limit_s=${IMAGEKIT_GPU_RUN_LIMIT:-480}
checks=()  # every check; IMAGEKIT_GPU_RUN_CHECKS=a,b runs those (the script's own test)
[ -n "${IMAGEKIT_GPU_RUN_CHECKS:-}" ] && checks=(--checks "$IMAGEKIT_GPU_RUN_CHECKS")
venv=${IMAGEKIT_GPU_VENV:-${TMPDIR:-/tmp}/imagekit-gpu-venv}

note() { echo "gpu-selfcheck: $*" | tee -a "$out/run.log" >&2; }

gpu_slug() {
    # "NVIDIA H200" -> h200, "NVIDIA H100 80GB HBM3" -> h100-80gb-hbm3
    local name
    name=$(timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
    name=${name#NVIDIA }
    name=$(echo "${name:-gpu}" | tr '[:upper:]' '[:lower:]' | tr -cs 'a-z0-9' '-')
    echo "${name%-}"
}

out=${1:-$root/docs/gpu-runs/$(date -u +%F)-$(gpu_slug)}
mkdir -p "$out"
: >"$out/run.log"

# -- 1. install: a venv over the system's packages, imagekit on its path (a .pth file, as an
#    editable install writes one): no build backend and no index are needed.
#    Where $python is itself a venv's, a new venv would not see its torch: then PYTHONPATH.
if timeout 120 "$python" -m venv --system-site-packages "$venv" >>"$out/run.log" 2>&1 &&
    timeout 120 "$venv/bin/python" -c 'import torch' >>"$out/run.log" 2>&1; then
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$root" >"$site/imagekit-gpu-run.pth"
    python="$venv/bin/python"
    note "installed: $root into $venv (the system's torch and pynvml visible)"
else
    export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
    note "no venv that sees $python's torch; running $python with PYTHONPATH=$root"
fi

# -- 2. the machine, as recorded beside the figures.
{
    echo "date: $(date -u +%FT%TZ)"
    # A copied tree has no .git: the caller may name the commit (IMAGEKIT_COMMIT).
    echo "commit: ${IMAGEKIT_COMMIT:-$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)}"
    echo "host: $(hostname)"
    echo "CUDA_VISIBLE_DEVICES: ${CUDA_VISIBLE_DEVICES-<unset>}"
    timeout 30 nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,mig.mode.current,pcie.link.gen.max,pcie.link.width.max \
        --format=csv 2>&1
    timeout 30 nvidia-smi -L 2>&1
    timeout 120 "$python" - <<'EOF' 2>&1
import platform
import torch
print("python", platform.python_version())
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("cudnn", torch.backends.cudnn.version())
try:
    print("nccl", ".".join(map(str, torch.cuda.nccl.version())))
except (AttributeError, RuntimeError) as exc:  # a CPU torch has no NCCL
    print("nccl: none:", exc)
print("arch list", " ".join(torch.cuda.get_arch_list()))
from importlib import metadata
try:
    print("nvidia-ml-py", metadata.version("nvidia-ml-py"))
except metadata.PackageNotFoundError as exc:
    print("nvidia-ml-py: not installed:", exc)
EOF
} >"$out/host.txt"
cat "$out/host.txt" >&2

# -- 3. how many GPUs this run must see. `nvidia-smi -L | wc -l` counts MIG instances as
#    lines too; --query-gpu lists physical GPUs only. With MIG on, or CUDA_VISIBLE_DEVICES
#    set, CUDA's count is not the physical one: no --expect-gpus, the self-check's own rules
#    (MIG, visible devices) judge what torch sees.
expect=()
modes=$(timeout 30 nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader 2>/dev/null)
physical=$(grep -c . <<<"$modes")
if grep -qi enabled <<<"$modes"; then
    note "MIG is on: $physical physical GPU(s); the count is left to the self-check's MIG rule"
elif [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
    note "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES: the count is left to the self-check"
elif [ "$physical" -gt 0 ]; then
    expect=(--expect-gpus "$physical")
    note "expecting $physical GPU(s) (nvidia-smi --query-gpu, MIG off)"
else
    note "nvidia-smi listed no GPU; the self-check will say why torch sees none"
fi

# -- 4. the self-check, natively, then the same snapshot judged again.
started=$(date +%s)
timeout "$limit_s" "$python" -m imagekit.selfcheck "${expect[@]}" "${checks[@]}" \
    --snapshot "$out/snapshot.json" --json "$out/selfcheck.json" --junit "$out/selfcheck.xml" \
    >"$out/table.txt" 2>>"$out/run.log"
rc=$?
note "self-check exit $rc after $(($(date +%s) - started)) s wall"
cat "$out/table.txt"
if [ ! -s "$out/snapshot.json" ]; then
    note "no snapshot was written"
    exit "$rc"
fi
timeout 60 "$python" -m imagekit.selfcheck --judge "$out/snapshot.json" >"$out/judged.txt" 2>>"$out/run.log"
# -- 5. the host copies in and out of a large free's wake (issue 52), after the self-check.
if ! timeout 180 "$python" "$root/scripts/host-copy-wake.py" >"$out/host-copy-wake.json" 2>>"$out/run.log"; then
    note "host-copy-wake.py did not finish (see run.log)"
fi
if ! diff -q "$out/table.txt" "$out/judged.txt" >/dev/null; then
    note "--judge printed a different table than the live run (see judged.txt)"
    exit 3
fi
note "--judge snapshot.json printed the same table"
exit "$rc"

#!/usr/bin/env bash
# The real tests marked `beside` (pyproject.toml): one pytest process per test file, on the
# running engine. They are the long ones that keep one CPU busy (QEMU's arm64 emulation; the
# CUDA cells' unpacking and export). After the real phase, on a machine of two CPUs or more,
# they run all at once: about the longest one's time instead of their sum. During it
# (scripts/test-all.sh, IMAGEKIT_TEST_BESIDE_SERIAL=1) they run one after another, so that
# with the real phase's own tests there are two busy processes on two CPUs, not three: three
# slowed the real phase's tests 2-4 times (docs/ci.md). Each process's output is printed when
# it ends, with its exit status; the script exits with the first failing one's.
# scripts/test-all.sh runs it under the phase's time limit, whose `timeout` signals this
# whole process group.
#
#   bash scripts/test-beside.sh [PYTEST-ARGS...]   # extra arguments go to every process
set -euo pipefail
cd "$(dirname "$0")/.."

selected="docker and beside"
# Other pytest processes build on this engine meanwhile (each other, and in CI the real
# phase): no test empties any of BuildKit's cache (devkit/realengine.py engine_shared)
export IMAGEKIT_TEST_SHARED_ENGINE=1
mapfile -t files < <(
  python -m pytest -q --collect-only -p no:randomly -m "$selected" tests \
    | sed -n 's/::.*//p' | sort -u
)
if [ "${#files[@]}" -eq 0 ]; then
  echo "test-beside: no test marked beside was collected" >&2
  exit 5  # pytest's own "no tests ran"
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/imagekit-beside.XXXXXX")
trap 'rm -rf "$logs"' EXIT
serial=${IMAGEKIT_TEST_BESIDE_SERIAL:-0}
pids=()
rc=0
started=$SECONDS
finish() {  # INDEX: wait for that file's process, then print its exit status and output
  local i=$1 status=0
  wait "${pids[$i]}" || status=$?
  echo "=== beside: ${files[$i]} exited $status at $((SECONDS - started))s"
  cat "$logs/$(basename "${files[$i]}").log"
  if [ "$status" -ne 0 ] && [ "$rc" -eq 0 ]; then rc=$status; fi
}
for i in "${!files[@]}"; do
  file=${files[$i]}
  python -m pytest --durations=0 --durations-min=10 -m "$selected" "$@" "$file" \
    >"$logs/$(basename "$file").log" 2>&1 &
  pids+=("$!")
  echo "test-beside: started $file (pid $!) at $((SECONDS - started))s"
  if [ "$serial" = 1 ]; then finish "$i"; fi
done
if [ "$serial" != 1 ]; then
  for i in "${!pids[@]}"; do finish "$i"; done
fi
exit "$rc"

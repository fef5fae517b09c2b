#!/usr/bin/env bash
# The real tests on the running engine (`bash scripts/real-tests.sh PYTEST-ARGS`, as
# scripts/test-all.sh runs them) as two pytest processes side by side: the files below, which
# share nothing with the session image and wait mostly on QEMU, downloads and no-cache builds,
# in one; every other file in the other. Each process prints its own durations and budgets
# (tests/real/budgets.toml); this fails if either fails. One engine serves both, as it serves
# parallel CI jobs; tests that touch shared engine state (the Debian base, the build cache)
# are written to tolerate the other process (tests/realengine.py debian_base takes a lock).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
BESIDE=(tests/real/test_platforms.py tests/real/test_cuda_layer_shared.py
        tests/real/test_venv_layers.py)
log=$(mktemp)
python -m pytest "$@" -p no:cacheprovider --basetemp /tmp/imagekit-real-beside "${BESIDE[@]}" \
  >"$log" 2>&1 &
beside=$!
trap 'kill "$beside" 2>/dev/null; rm -f "$log"' EXIT
ignored=()
for file in "${BESIDE[@]}"; do ignored+=(--ignore "$file"); done
python -m pytest "$@" --basetemp /tmp/imagekit-real-main "${ignored[@]}" tests/real
main=$?
wait "$beside"
other=$?
echo "=== the files run beside the others (${BESIDE[*]}): exit $other"
cat "$log"
[ "$main" -eq 0 ] && [ "$other" -eq 0 ]

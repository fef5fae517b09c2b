#!/usr/bin/env bash
# The whole test suite on a fresh Debian machine: installs and starts what the real tests
# need (the three Docker engines, a local registry, debootstrap, the actionlint checker),
# makes the virtual environment, runs ruff and `imagekit render --check`, the unit tests,
# then the real-engine tests: all of them on the default engine (Docker 28 + buildx on the
# containerd image store), the `compat` subset on the classic store and on Debian 12's
# Docker 20.10. Each phase has its own time limit and prints its duration; each engine's
# phase starts from an empty data folder and deletes what it made (`engines.sh wipe`). The
# default engine is left running.
#
#   bash scripts/test-all.sh            # everything, as CI runs it (.ci/run)
#   bash scripts/test-all.sh ARGS...    # set up, then `pytest ARGS` on the running engine
set -euo pipefail
cd "$(dirname "$0")/.."

# Time limits per phase, in seconds (a hang fails there with its log, never at CI's limit).
# On this project's 2-CPU machine the real suite on the containerd store took 1270-1696 s on
# 2026-11-28 (the machine's own speed varies that much), of which the arm64 path and the CUDA
# cells 400-530 s, run beside the rest of it (about 450 s, one after the other); each real test
# has a budget of its own (tests/real/budgets.toml). The limits hold a day twice as slow, and a
# hang still fails well inside CI's 90 minutes.
: "${IMAGEKIT_LIMIT_SETUP:=1500}" "${IMAGEKIT_LIMIT_UNIT:=900}"
: "${IMAGEKIT_LIMIT_REAL:=2400}" "${IMAGEKIT_LIMIT_BESIDE:=1500}" "${IMAGEKIT_LIMIT_COMPAT:=900}"

started=$SECONDS
phase() {  # NAME LIMIT COMMAND...: run COMMAND under LIMIT, print how long it took
  local name=$1 limit=$2 t0=$SECONDS rc=0
  shift 2
  echo "=== phase $name (limit ${limit}s)"
  timeout --kill-after=60 "$limit" "$@" || rc=$?
  local took=$((SECONDS - t0))
  if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 124 ] && echo "=== phase $name TIMED OUT after ${took}s (limit ${limit}s)"
    echo "=== phase $name FAILED (exit $rc) after ${took}s; suite at $((SECONDS - started))s"
    exit "$rc"
  fi
  echo "=== phase $name passed in ${took}s; suite at $((SECONDS - started))s"
}

real() {  # NAME LIMIT MARKERS: the real tests MARKERS selects (one -m: pytest keeps the last)
  phase "$1" "$2" python -m pytest --durations=0 --durations-min=10 -m "$3"
}

# With two CPUs or more, the `beside` tests run during the real phase, not after it: its own
# tests keep about one of two CPUs busy (1.16 on 2026-11-29), the `beside` ones one each, so
# they run one after another there (IMAGEKIT_TEST_BESIDE_SERIAL): two busy processes on two
# CPUs, not three. They start once the real phase has built its session image (a cold build
# that needs both CPUs) and run the tests that check BuildKit's cache (`checks_cache`, first:
# tests/real/gate.py), or when its pytest ends; the tests that install the whole venv
# uncached (`builds_cold`) come last, and those that empty BuildKit's cache (`empties_cache`)
# wait for them. A test of the real phase may share the CPUs with them: its budget counts 1.5
# times (some took 2-4 times as long beside both at once, 2026-11-29).
beside_pid="" beside_log=""
real_with_beside() {  # NAME LIMIT MARKERS
  local name=$1 limit=$2 markers=$3 t0=$SECONDS rc=0
  beside_log=$(mktemp "${TMPDIR:-/tmp}/imagekit-beside.XXXXXX")
  export IMAGEKIT_TEST_SESSION_READY=$beside_log.ready
  (
    until [ -e "$IMAGEKIT_TEST_SESSION_READY" ]; do sleep 2; done
    echo "test-beside: starting $((SECONDS - t0))s into $name"
    IMAGEKIT_TEST_BESIDE_SERIAL=1 exec timeout --kill-after=60 "$IMAGEKIT_LIMIT_BESIDE" \
      bash scripts/test-beside.sh
  ) >"$beside_log" 2>&1 &
  beside_pid=$!
  echo "=== phase $name-beside started beside $name (limit ${IMAGEKIT_LIMIT_BESIDE}s, pid $beside_pid)"
  IMAGEKIT_TEST_BUDGET_SCALE=1.5 real "$name" "$limit" "$markers and not empties_cache"
  touch "$IMAGEKIT_TEST_SESSION_READY"  # where no test opened the gate: they start now
  unset IMAGEKIT_TEST_SESSION_READY
  wait "$beside_pid" || rc=$?
  beside_pid=""
  show_beside_log
  local took=$((SECONDS - t0))
  if [ "$rc" -ne 0 ]; then
    echo "=== phase $name-beside FAILED (exit $rc) after ${took}s; suite at $((SECONDS - started))s"
    exit "$rc"
  fi
  echo "=== phase $name-beside passed, $name with it in ${took}s; suite at $((SECONDS - started))s"
  real "$name-last" "$limit" "$markers and empties_cache"
}

stop_beside() {  # after a failure: the beside tests' processes, before their engine is wiped
  [ -n "$beside_pid" ] || return 0
  kill "$beside_pid" 2>/dev/null || true  # `timeout`, which signals test-beside's group
  wait "$beside_pid" 2>/dev/null || true
  echo "=== the beside tests' output so far (stopped)"
  show_beside_log
}

show_beside_log() {  # what the beside tests printed, then their log and gate file removed
  cat "$beside_log" && rm -f "$beside_log" "$beside_log.ready"
  beside_log=""
}

on_engine() {  # ENGINE NAME LIMIT MARKERS [beside]: the tests on ENGINE, then wipe what it made
  local engine=$1 name=$2 limit=$3 markers=$4 beside=${5:-}
  # a run that failed or was stopped earlier left its images and cache: a full disk would
  # show up as unrelated red tests, so start from an empty data folder, and wipe after a
  # failed phase too. Deleting the folder takes seconds where pruning took 1-2 minutes.
  phase "wipe-$engine" 600 bash .ci/engines.sh wipe "$engine"
  phase "start-$engine" 120 bash .ci/engines.sh start "$engine"
  eval "$(bash .ci/engines.sh env "$engine")"
  trap 'echo "=== wiping $engine after the failure"; stop_beside; bash .ci/engines.sh wipe '"$engine"' || true' EXIT
  # during the real phase where there are two CPUs (IMAGEKIT_TEST_BESIDE_DURING=0: after it)
  if [ "$beside" = beside ] && [ "$(nproc)" -ge 2 ] && [ "${IMAGEKIT_TEST_BESIDE_DURING:-1}" = 1 ]; then
    real_with_beside "$name" "$limit" "$markers"
  else
    real "$name" "$limit" "$markers"
    # the long one-CPU tests (marked `beside`, left out of MARKERS) after the others, each
    # file in its own process, at once: about the longest one's time instead of their sum
    if [ "$beside" = beside ]; then
      phase "$name-beside" "$IMAGEKIT_LIMIT_BESIDE" bash scripts/test-beside.sh
    fi
  fi
  trap - EXIT
  phase "wipe-$engine" 600 bash .ci/engines.sh wipe "$engine"
  phase "reset-registry" 120 bash .ci/setup-host.sh reset-registry
}

phase engines "$IMAGEKIT_LIMIT_SETUP" bash .ci/engines.sh install
export IMAGEKIT_ENGINE=${IMAGEKIT_ENGINE:-containerd}  # the engine the suite starts on
phase setup-host "$IMAGEKIT_LIMIT_SETUP" bash .ci/setup-host.sh
phase dev-setup 900 bash scripts/dev-setup.sh
. .venv/bin/activate
eval "$(bash .ci/engines.sh env)"

if [ $# -gt 0 ]; then
  exec python -m pytest "$@"
fi

phase lint 300 sh -c 'ruff check imagekit tests bench devkit && ruff format --check imagekit tests bench devkit'
phase render-check 120 imagekit render --check
# the unit tests on every CPU (pytest-xdist), then the few that time themselves, alone. Not
# beside the real phase: with the CPUs halved, a real test then ran over its budget
phase unit "$IMAGEKIT_LIMIT_UNIT" python -m pytest -m "not docker and not alone" -n auto \
  --durations=15
phase unit-alone 300 python -m pytest -m "not docker and alone" --durations=5
# the Debian root filesystems this run bootstraps, kept for the next engines' phases
# (devkit/realengine.py debian_base): one debootstrap per OS and platform, made fresh each run
export IMAGEKIT_TEST_BASES=${IMAGEKIT_TEST_BASES:-/var/tmp/imagekit-test-bases}
rm -rf "$IMAGEKIT_TEST_BASES"
on_engine containerd real-containerd "$IMAGEKIT_LIMIT_REAL" "docker and not beside" beside
on_engine classic compat-classic "$IMAGEKIT_LIMIT_COMPAT" "docker and compat"
on_engine docker20 compat-docker20 "$IMAGEKIT_LIMIT_COMPAT" "docker and compat"
phase start-containerd 120 bash .ci/engines.sh start containerd
rm -rf "$IMAGEKIT_TEST_BASES"
echo "=== test-all: every phase passed in $((SECONDS - started))s"

# Sourced by imagekit's install steps. Turns BuildKit secrets into installer settings for
# one RUN; the secret files are mounted under /run/secrets and never written to a layer.
if [ -s /run/secrets/ca ]; then
  export PIP_CERT=/run/secrets/ca SSL_CERT_FILE=/run/secrets/ca REQUESTS_CA_BUNDLE=/run/secrets/ca
fi
if [ -s /run/secrets/index ]; then
  PIP_INDEX_URL="$(cat /run/secrets/index)"
  export PIP_INDEX_URL UV_INDEX_URL="$PIP_INDEX_URL"
  case "$PIP_INDEX_URL" in
    http://*)
      # pip caches nothing from a plain-http index unless the host is trusted, so the cache
      # mount would not save a single download. The URL is yours; trust its host.
      host="${PIP_INDEX_URL#http://}"; host="${host%%/*}"; host="${host##*@}"
      export PIP_TRUSTED_HOST="$host"
      ;;
  esac
fi
# A cell built for amd64 and arm64 may take arm64's torch from another index (PyPI's aarch64
# wheel is the CPU build up to torch 2.10): its Dockerfile then declares this one too.
if [ "${TARGETARCH:-}" = arm64 ] && [ -n "${TORCH_INDEX_URL_ARM64+set}" ]; then
  TORCH_INDEX_URL=$TORCH_INDEX_URL_ARM64
fi
# uv's cache is a cache mount, another filesystem than the venv: copy, don't try to link
# (the venv's package groups bring a cache of their own, and link).
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore UV_LINK_MODE=copy

# Parallel compile jobs for a CUDA extension (MAX_JOBS): the CPUs this build may use, and
# about 9 GB of memory each (flash-attn's setup.py: a job peaks at 8-9 GB with nvcc's
# default 4 threads); the memory is what is available, or the cgroup's limit if lower.
imagekit_max_jobs() {
  cpus=$(nproc 2>/dev/null || echo 1)
  mem_kb=$(awk '/^MemAvailable:/ {print $2}' "${IMAGEKIT_MEMINFO:-/proc/meminfo}")
  limit=$(cat "${IMAGEKIT_CGROUP_MEMORY:-/sys/fs/cgroup/memory.max}" 2>/dev/null || echo max)
  if [ "$limit" != max ] && [ $((limit / 1024)) -lt "${mem_kb:-0}" ]; then
    mem_kb=$((limit / 1024))
  fi
  jobs=$(( ${mem_kb:-0} / (9 * 1024 * 1024) ))
  [ "$jobs" -gt "$cpus" ] && jobs=$cpus
  [ "$jobs" -lt 1 ] && jobs=1
  echo "$jobs"
}

# Constraints that pin PACKAGE to the version of its wheel in the wheelhouse (imagekit build
# --wheelhouse), if there is one: a prebuilt flash-attn is then installed even where the
# index has a newer sdist, instead of compiling for an hour. The same file works for pip and
# uv, and is empty when the wheelhouse has none.
imagekit_prebuilt() {
  for package in "$@"; do
    file=$(printf '%s' "$package" | tr '-' '_')
    for wheel in "${IMAGEKIT_WHEELHOUSE:-/wheelhouse}/$file"-*.whl; do
      [ -e "$wheel" ] || continue
      version=${wheel##*/}
      version=${version#"$file"-}
      echo "$package==${version%%-*}"
      break
    done
  done
}

# Give every file a step changed (newer than MARKER, under the folders given) one fixed date,
# and the folders above them too, so that the layer of the same wheels has the same digest
# in every build (a layer records each file's mtime, and its parent folders'). Not across
# mounts (-xdev): bind mounts under /opt are not the layer's.
imagekit_normalize() {
  marker=$1
  shift
  find "$@" -xdev -cnewer "$marker" -exec touch -h -d "@${SOURCE_DATE_EPOCH:-315532800}" {} +
  for folder in "$@"; do
    while [ "$folder" != / ] && [ "$folder" != . ]; do
      touch -h -d "@${SOURCE_DATE_EPOCH:-315532800}" "$folder"
      folder=$(dirname "$folder")
    done
  done
}

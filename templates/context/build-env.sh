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
# uv's cache is a cache mount, another filesystem than the venv: copy, don't try to link.
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore UV_LINK_MODE=copy

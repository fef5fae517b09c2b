# Rendered by imagekit for cell imagekit-test-cpu-torch2.13.0-py3.11-debian12-slim (tests/data/envs/cpu.yaml:11).
# Do not edit: change envs/ and run `imagekit render`. Build it with `imagekit build`,
# which stages the context (imagekit/, wheelhouse/, source/) and passes the secrets.
#
# Stages, least-changing first:
#   os-base  OS packages and the non-root user
#   builder  os-base + the installer, and the pins of torch and the features
#   runtime  os-base + your apt packages + the environment, then env, labels, source last
#   sbom-tool  the SBOM writer's library, mounted for the runtime stage's SBOM step only

FROM debian:bookworm-slim AS os-base
ENV LANG=C.UTF-8 LC_ALL=C.UTF-8
# Real (empty) files where every RUN gets the build's hosts and resolv.conf: created as mount
# points and removed again, they would stamp /etc with each step's time (`docker run` and
# Kubernetes mount their own over them).
COPY imagekit/etc/ /etc/
# While imagekit builds, apt keeps downloaded .debs in the cache mount instead of deleting
# them after each install; the runtime stage puts the base image's setting back.
RUN if [ -f /etc/apt/apt.conf.d/docker-clean ]; then \
      mv /etc/apt/apt.conf.d/docker-clean /etc/apt/imagekit-docker-clean.saved; fi \
    && echo 'Binary::apt::APT::Keep-Downloaded-Packages "true";' > /etc/apt/apt.conf.d/imagekit-keep-cache
RUN --mount=type=cache,id=imagekit-apt-cache-debian12,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=imagekit-apt-lists-debian12,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=tmpfs,target=/tmp \
    touch /tmp/imagekit-started \
    && if [ "$(dpkg-query -W -f '${db:Status-Abbrev}' ca-certificates g++ libpython3.11-dev python3 python3-venv 2>/dev/null)" != "ii ii ii ii ii " ]; then \
         apt-get update \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            -o Dpkg::Options::=--force-unsafe-io \
            ca-certificates \
            g++ \
            libpython3.11-dev \
            python3 \
            python3-venv; \
       fi \
    && for log in /var/log/apt/history.log /var/log/apt/term.log /var/log/dpkg.log \
         /var/log/alternatives.log /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old; do \
         if [ -f "$log" ]; then : > "$log"; fi; \
       done \
    && find / -xdev -cnewer /tmp/imagekit-started -exec touch -h -d @315532800 {} +
# The non-root runtime user (Ubuntu 24.04 images already use uid 1000 for "ubuntu").
RUN if id -u ubuntu >/dev/null 2>&1; then userdel --remove ubuntu; fi \
    && useradd --create-home --uid 1000 --shell /bin/bash imagekit \
    && install -d -o 1000 -g 1000 /workspace

FROM os-base AS builder
# Where torch comes from; `imagekit build --torch-index` overrides it (empty: wheelhouse/PyPI).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN SOURCE_DATE_EPOCH=315532800 python3.11 -m venv /opt/venv
# The OS's venv pip is old (23.0 on Debian 12): a current one builds sdists as wheels
# (PEP 517), which its cache keeps for the next rebuild.
RUN --mount=type=cache,id=imagekit-pip,target=/root/.cache/pip,sharing=private \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && export SOURCE_DATE_EPOCH=315532800 \
    && /opt/venv/bin/pip install --find-links /wheelhouse \
       'pip>=25'
# Resolve torch and the features once (groups.py); the runtime installs the pinned groups
# as layers, so the environment is written once, straight into the runtime. A package lock
# in the context (`imagekit lock --packages`) is copied instead: its pins, with hashes.
RUN --mount=type=cache,id=imagekit-pip,target=/root/.cache/pip,sharing=private \
--mount=type=bind,source=imagekit/groups.py,target=/run/imagekit/groups.py \
    --mount=type=bind,source=imagekit/locked,target=/run/imagekit/locked \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && /opt/venv/bin/python /run/imagekit/groups.py --installer pip \
       --out /opt/imagekit/groups --locked /run/imagekit/locked \
       ${TORCH_INDEX_URL:+--index "$TORCH_INDEX_URL"} \
       --torch torch==2.13.0 \
       --feature 'onnx>=1.16' --feature 'onnxscript>=0.1' --feature 'onnxruntime>=1.19' \
    && find /opt/venv -exec touch -h -d @315532800 {} +


# The SBOM writer's library, for one step of the runtime stage (mounted there, never copied).
FROM builder AS sbom-tool
RUN --mount=type=cache,id=imagekit-pip-sbom-tool,target=/root/.cache/pip,sharing=private \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && /opt/venv/bin/pip install --find-links /wheelhouse --no-compile --target /opt/sbom-tool \
       cyclonedx-python-lib==11.12.0

FROM os-base AS runtime
# apt as in the base image again, for images built FROM this one: downloaded .debs are
# deleted after each install (the docker-clean of Debian's and Ubuntu's official images).
RUN rm /etc/apt/apt.conf.d/imagekit-keep-cache \
    && if [ -f /etc/apt/imagekit-docker-clean.saved ]; then \
         mv /etc/apt/imagekit-docker-clean.saved /etc/apt/apt.conf.d/docker-clean; \
       else \
         printf '%s\n' \
           'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };' \
           'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };' \
           'Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";' \
           > /etc/apt/apt.conf.d/docker-clean; \
       fi
# The venv, without packages yet: the builder only resolved them (groups.py). They arrive
# below in layers, least-changing and most widely shared first; every file gets one fixed
# date and hash-checked bytecode, so the same wheels make the same layer in every cell and
# on every rebuild, and a registry or node stores it once.
# The folders of what follows and the mount points of its steps, made here with one fixed
# date: created by a COPY or a mount, they would carry this build's time into those layers.
RUN --mount=type=tmpfs,target=/tmp \
    touch /tmp/imagekit-started \
    && mkdir -p /opt/venv /opt/imagekit/cuda /opt/uv /run/imagekit/groups /run/secrets \
        /wheelhouse /root/.cache/pip \
    && touch /run/imagekit/build-env.sh /run/secrets/ca /run/secrets/index \
    && find / -xdev -cnewer /tmp/imagekit-started -exec touch -h -d @315532800 {} +
COPY --from=builder /opt/venv /opt/venv
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# The NVIDIA CUDA libraries, at a Python-independent path, in 4 layers split by wheel
# name (buildtime/lockfile.py, CUDA_PARTS): each layer is the same for every cell that pins
# the same versions, and the export compresses them side by side on every core.
# Layer: CUDA libraries, part 1 of 4.
RUN --mount=type=cache,id=imagekit-pip,target=/root/.cache/pip,sharing=private \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 \
    && /opt/venv/bin/pip install --find-links /wheelhouse --no-compile --no-deps --target /opt/imagekit/cuda ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/cuda-1.txt \
    && imagekit_normalize /tmp/imagekit-started /opt/imagekit/cuda
# Layer: CUDA libraries, part 2 of 4.
RUN --mount=type=cache,id=imagekit-pip,target=/root/.cache/pip,sharing=private \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 \
    && /opt/venv/bin/pip install --find-links /wheelhouse --no-compile --no-deps --target /opt/imagekit/cuda ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/cuda-2.txt \
    && imagekit_normalize /tmp/imagekit-started /opt/imagekit/cuda
# Layer: CUDA libraries, part 3 of 4.
RUN --mount=type=cache,id=imagekit-pip,target=/root/.cache/pip,sharing=private \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 \
    && /opt/venv/bin/pip install --find-links /wheelhouse --no-compile --no-deps --target /opt/imagekit/cuda ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/cuda-3.txt \
    && imagekit_normalize /tmp/imagekit-started /opt/imagekit/cuda
# Layer: CUDA libraries, part 4 of 4.
RUN --mount=type=cache,id=imagekit-pip,target=/root/.cache/pip,sharing=private \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 \
    && /opt/venv/bin/pip install --find-links /wheelhouse --no-compile --no-deps --target /opt/imagekit/cuda ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/cuda-4.txt \
    && imagekit_normalize /tmp/imagekit-started /opt/imagekit/cuda
# The venv finds them where torch's RPATH looks ($ORIGIN/../../nvidia/...).
RUN for entry in /opt/imagekit/cuda/*; do \
      ln -s "$entry" /opt/venv/lib/python3.11/site-packages/; \
    done \
    && touch -h -d @315532800 /opt/venv/lib/python3.11/site-packages \
       /opt/venv/lib/python3.11/site-packages/*
# Layer: torch and everything it needs.
RUN --mount=type=cache,id=imagekit-pip,target=/root/.cache/pip,sharing=private \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 \
    && /opt/venv/bin/pip install --find-links /wheelhouse --no-deps ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/torch.txt \
    && imagekit_normalize /tmp/imagekit-started /opt/venv
# Layer: the features (onnx-tensorrt).
RUN --mount=type=cache,id=imagekit-pip,target=/root/.cache/pip,sharing=private \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 \
    && /opt/venv/bin/pip install --find-links /wheelhouse --no-deps ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/features.txt \
    && imagekit_normalize /tmp/imagekit-started /opt/venv
COPY imagekit/entrypoint.sh /usr/local/bin/imagekit-entrypoint
COPY imagekit/lib/imagekit /opt/venv/lib/python3.11/site-packages/imagekit
# OMP_NUM_THREADS at every start of this venv's Python, also where the entrypoint is replaced.
COPY imagekit/lib/imagekit-threads.pth /opt/venv/lib/python3.11/site-packages/
# What this image promises (the same as its io.imagekit.* labels), for the self-check.
COPY imagekit/labels.json /etc/imagekit/labels.json
# The SBOM (docs/sbom.md): the venv's Python packages, with the package lock's hashes, and
# dpkg's packages, as CycloneDX JSON. Its writer's library is mounted for this step only, so
# it lands in no layer; the file gets the layers' one date, so the same packages make the
# same layer.
RUN --mount=type=bind,from=sbom-tool,source=/opt/sbom-tool,target=/run/imagekit/sbom-tool \
    --mount=type=bind,source=imagekit/sbom_writer.py,target=/run/imagekit/sbom_writer.py \
    --mount=type=bind,source=imagekit/locked,target=/run/imagekit/locked \
    mkdir -p /opt/imagekit \
    && PYTHONPATH=/run/imagekit/sbom-tool PYTHONDONTWRITEBYTECODE=1 /opt/venv/bin/python \
       /run/imagekit/sbom_writer.py --site /opt/venv/lib/python3.11/site-packages \
       --dpkg-status /var/lib/dpkg/status --os-release /etc/os-release \
       --locked /run/imagekit/locked --name imagekit-test-cpu-torch2.13.0-py3.11-debian12-slim --epoch 315532800 \
       --out /opt/imagekit/sbom.cdx.json \
    && touch -h -d @315532800 /opt /opt/imagekit /opt/imagekit/sbom.cdx.json
ENV PATH=/opt/venv/bin:$PATH VIRTUAL_ENV=/opt/venv
# Tuned defaults from the cell's profile; `docker run -e NAME=...` overrides any of them.
ENV IMAGEKIT_PROFILE="single-node"
LABEL io.imagekit.archs="" \
      io.imagekit.cell="imagekit-test-cpu-torch2.13.0-py3.11-debian12-slim" \
      io.imagekit.compile="true" \
      io.imagekit.cuda="cpu" \
      io.imagekit.features="onnx-tensorrt" \
      io.imagekit.flavor="slim" \
      io.imagekit.forward-branches="" \
      io.imagekit.min-driver="" \
      io.imagekit.os="debian12" \
      io.imagekit.profile="single-node" \
      io.imagekit.python="3.11" \
      io.imagekit.torch="2.13.0" \
      io.imagekit.variant="cpu" \
      io.imagekit.version="0.1.0" \
      org.opencontainers.image.base.name="debian:bookworm-slim" \
      org.opencontainers.image.description="PyTorch 2.13.0 (cpu), Python 3.11, debian12, slim flavor; built by imagekit" \
      org.opencontainers.image.title="imagekit-test" \
      org.opencontainers.image.version="2.13.0-cpu-py3.11-debian12-slim"
USER 1000:1000
WORKDIR /workspace
# Sets OMP_NUM_THREADS from the cgroup CPU quota at start unless you set it, then runs CMD.
ENTRYPOINT ["/usr/local/bin/imagekit-entrypoint"]
CMD ["python"]
COPY --chown=1000:1000 source/ /workspace/

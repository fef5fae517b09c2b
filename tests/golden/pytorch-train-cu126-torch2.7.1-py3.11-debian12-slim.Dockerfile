# Rendered by imagekit for cell pytorch-train-cu126-torch2.7.1-py3.11-debian12-slim (envs/training.yaml:33).
# Do not edit: change envs/ and run `imagekit render`. Build it with `imagekit build`,
# which stages the context (imagekit/, wheelhouse/, source/) and passes the secrets.
#
# Stages, least-changing first:
#   os-base  OS packages and the non-root user
#   builder  os-base + the installer, and the pins of torch and the features
#   runtime  os-base + your apt packages + the environment + your pip packages,
#            then env, labels, source last
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
ARG TORCH_INDEX_URL=
ENV UV_PYTHON_INSTALL_DIR=/opt/python
# uv in a venv of its own, installed by the pip wheel the OS ships for ensurepip, run from
# the wheel: a venv with pip of its own would take ensurepip's 3-5 s on a cold build's path.
RUN --mount=type=cache,id=imagekit-pip,target=/root/.cache/pip,sharing=private \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && if set -- /usr/share/python-wheels/pip-*.whl && [ -f "$1" ]; then \
         python3 -m venv --without-pip /opt/uv \
         && /opt/uv/bin/python "$1/pip" install --find-links /wheelhouse 'uv>=0.4'; \
       else \
         python3 -m venv /opt/uv && /opt/uv/bin/pip install --find-links /wheelhouse 'uv>=0.4'; \
       fi \
    && /opt/uv/bin/uv venv --python /usr/bin/python3.11 /opt/venv
# Resolve torch and the features once (groups.py); the runtime installs the pinned groups
# as layers, so the environment is written once, straight into the runtime. A package lock
# in the context (`imagekit lock --packages`) is copied instead: its pins, with hashes.
RUN --mount=type=cache,id=imagekit-uv,target=/root/.cache/uv,sharing=shared \
--mount=type=bind,source=imagekit/groups.py,target=/run/imagekit/groups.py \
    --mount=type=bind,source=imagekit/locked,target=/run/imagekit/locked \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && /opt/venv/bin/python /run/imagekit/groups.py --installer uv \
       --out /opt/imagekit/groups --locked /run/imagekit/locked \
       ${TORCH_INDEX_URL:+--index "$TORCH_INDEX_URL"} \
       --torch torch==2.7.1 --torch torchvision==0.22.1 --torch 'nvidia-ml-py>=12.535' \
       --feature 'onnx>=1.16' --feature 'onnxscript>=0.1' --feature 'onnxruntime-gpu>=1.19,<1.27' \
    && find /opt/venv -exec touch -h -d @315532800 {} +


# The SBOM writer's library, for one step of the runtime stage (mounted there, never copied).
FROM builder AS sbom-tool
RUN --mount=type=cache,id=imagekit-uv-sbom-tool,target=/root/.cache/uv,sharing=shared \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse --target /opt/sbom-tool \
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
        /wheelhouse /root/.cache/uv \
    && touch /run/imagekit/build-env.sh /run/secrets/ca /run/secrets/index \
    && find / -xdev -cnewer /tmp/imagekit-started -exec touch -h -d @315532800 {} +
COPY --from=builder /opt/venv /opt/venv
ARG TORCH_INDEX_URL=
# The NVIDIA CUDA libraries, at a Python-independent path, in 4 layers split by wheel
# name (buildtime/lockfile.py, CUDA_PARTS): each layer is the same for every cell that pins
# the same versions, and the export compresses them side by side on every core.
# Layer: CUDA libraries, part 1 of 4.
# uv unpacks the wheels into a cache beside the target, on the layer's own filesystem, and
# hard-links them into place: written once. From the cache mount (another filesystem) it
# would copy every file a second time. The unpacked cache is gone before the layer is.
RUN \
    --mount=type=bind,from=builder,source=/opt/uv,target=/opt/uv \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 UV_CACHE_DIR=/opt/imagekit/.uv-unpack UV_LINK_MODE=hardlink \
    && /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse --no-deps --target /opt/imagekit/cuda ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/cuda-1.txt \
    && rm -rf /opt/imagekit/.uv-unpack \
    && imagekit_normalize /tmp/imagekit-started /opt/imagekit/cuda
# Layer: CUDA libraries, part 2 of 4.
# uv unpacks the wheels into a cache beside the target, on the layer's own filesystem, and
# hard-links them into place: written once. From the cache mount (another filesystem) it
# would copy every file a second time. The unpacked cache is gone before the layer is.
RUN \
    --mount=type=bind,from=builder,source=/opt/uv,target=/opt/uv \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 UV_CACHE_DIR=/opt/imagekit/.uv-unpack UV_LINK_MODE=hardlink \
    && /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse --no-deps --target /opt/imagekit/cuda ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/cuda-2.txt \
    && rm -rf /opt/imagekit/.uv-unpack \
    && imagekit_normalize /tmp/imagekit-started /opt/imagekit/cuda
# Layer: CUDA libraries, part 3 of 4.
# uv unpacks the wheels into a cache beside the target, on the layer's own filesystem, and
# hard-links them into place: written once. From the cache mount (another filesystem) it
# would copy every file a second time. The unpacked cache is gone before the layer is.
RUN \
    --mount=type=bind,from=builder,source=/opt/uv,target=/opt/uv \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 UV_CACHE_DIR=/opt/imagekit/.uv-unpack UV_LINK_MODE=hardlink \
    && /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse --no-deps --target /opt/imagekit/cuda ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/cuda-3.txt \
    && rm -rf /opt/imagekit/.uv-unpack \
    && imagekit_normalize /tmp/imagekit-started /opt/imagekit/cuda
# Layer: CUDA libraries, part 4 of 4.
# uv unpacks the wheels into a cache beside the target, on the layer's own filesystem, and
# hard-links them into place: written once. From the cache mount (another filesystem) it
# would copy every file a second time. The unpacked cache is gone before the layer is.
RUN \
    --mount=type=bind,from=builder,source=/opt/uv,target=/opt/uv \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 UV_CACHE_DIR=/opt/imagekit/.uv-unpack UV_LINK_MODE=hardlink \
    && /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse --no-deps --target /opt/imagekit/cuda ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/cuda-4.txt \
    && rm -rf /opt/imagekit/.uv-unpack \
    && imagekit_normalize /tmp/imagekit-started /opt/imagekit/cuda
# The venv finds them where torch's RPATH looks ($ORIGIN/../../nvidia/...).
RUN for entry in /opt/imagekit/cuda/*; do \
      ln -s "$entry" /opt/venv/lib/python3.11/site-packages/; \
    done \
    && touch -h -d @315532800 /opt/venv/lib/python3.11/site-packages \
       /opt/venv/lib/python3.11/site-packages/*
# Layer: torch and everything it needs.
# uv unpacks the wheels into a cache beside the target, on the layer's own filesystem, and
# hard-links them into place: written once. From the cache mount (another filesystem) it
# would copy every file a second time. The unpacked cache is gone before the layer is.
RUN \
    --mount=type=bind,from=builder,source=/opt/uv,target=/opt/uv \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 UV_CACHE_DIR=/opt/venv/.uv-unpack UV_LINK_MODE=hardlink \
    && /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse --compile-bytecode --no-deps ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/torch.txt \
    && rm -rf /opt/venv/.uv-unpack \
    && imagekit_normalize /tmp/imagekit-started /opt/venv
# Layer: the features (onnx).
# uv unpacks the wheels into a cache beside the target, on the layer's own filesystem, and
# hard-links them into place: written once. From the cache mount (another filesystem) it
# would copy every file a second time. The unpacked cache is gone before the layer is.
RUN \
    --mount=type=bind,from=builder,source=/opt/uv,target=/opt/uv \
    --mount=type=tmpfs,target=/tmp \
    --mount=type=bind,from=builder,source=/opt/imagekit/groups,target=/run/imagekit/groups \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && touch /tmp/imagekit-started && export SOURCE_DATE_EPOCH=315532800 PYTHONDONTWRITEBYTECODE=1 UV_CACHE_DIR=/opt/venv/.uv-unpack UV_LINK_MODE=hardlink \
    && /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse --compile-bytecode --no-deps ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       -r \
       /run/imagekit/groups/features.txt \
    && rm -rf /opt/venv/.uv-unpack \
    && imagekit_normalize /tmp/imagekit-started /opt/venv
COPY imagekit/entrypoint.sh /usr/local/bin/imagekit-entrypoint
COPY imagekit/lib/imagekit /opt/venv/lib/python3.11/site-packages/imagekit
# OMP_NUM_THREADS at every start of this venv's Python, also where the entrypoint is replaced.
COPY imagekit/lib/imagekit-threads.pth /opt/venv/lib/python3.11/site-packages/
# What this image promises (the same as its io.imagekit.* labels), for the self-check.
COPY imagekit/labels.json /etc/imagekit/labels.json
# Your pip packages, after everything that changes less often, installed in place: this
# layer holds exactly what they add or change, so adding one rebuilds and re-pushes this
# layer, not torch. (With build_apt they are built in the builder instead.) The stack the
# venv holds (torch, the CUDA libraries, Python) constrains them: one that asks for another
# fails this step, named (team_install.py).
RUN --mount=type=cache,id=imagekit-uv,target=/root/.cache/uv,sharing=shared \
    --mount=type=cache,id=imagekit-pyc,target=/root/.cache/imagekit-pyc,sharing=shared \
    --mount=type=bind,from=builder,source=/opt/uv,target=/opt/uv \
    --mount=type=bind,source=imagekit/pyc_cache.py,target=/run/imagekit/pyc_cache.py \
    --mount=type=bind,source=imagekit/team_install.py,target=/run/imagekit/team_install.py \
    --mount=type=bind,source=imagekit/locked,target=/run/imagekit/locked \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && started=$(date +%s%N) \
    && /opt/venv/bin/python -B /run/imagekit/team_install.py --locked /run/imagekit/locked \
       /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse -- \
       'numpy<3' \
       'tqdm>=4.66' \
    && /opt/venv/bin/python /run/imagekit/pyc_cache.py --since "$started" /opt/venv /root/.cache/imagekit-pyc
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
       --locked /run/imagekit/locked --name pytorch-train-cu126-torch2.7.1-py3.11-debian12-slim --epoch 315532800 \
       --out /opt/imagekit/sbom.cdx.json \
    && touch -h -d @315532800 /opt /opt/imagekit /opt/imagekit/sbom.cdx.json
ENV PATH=/opt/venv/bin:$PATH VIRTUAL_ENV=/opt/venv
# Tuned defaults from the cell's profile; `docker run -e NAME=...` overrides any of them.
ENV IMAGEKIT_PROFILE="single-node" \
    NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_REQUIRE_CUDA="cuda>=12.0" \
    NVIDIA_VISIBLE_DEVICES="all" \
    PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" \
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE="1"
LABEL io.imagekit.archs="5.0 6.0 7.0 7.5 8.0 8.6 9.0" \
      io.imagekit.cell="pytorch-train-cu126-torch2.7.1-py3.11-debian12-slim" \
      io.imagekit.compile="true" \
      io.imagekit.cuda="12.6" \
      io.imagekit.features="onnx" \
      io.imagekit.flavor="slim" \
      io.imagekit.forward-branches="" \
      io.imagekit.min-driver="525.60.13" \
      io.imagekit.os="debian12" \
      io.imagekit.profile="single-node" \
      io.imagekit.python="3.11" \
      io.imagekit.torch="2.7.1" \
      io.imagekit.variant="cu126" \
      io.imagekit.version="0.1.0" \
      org.opencontainers.image.base.name="debian:bookworm-slim" \
      org.opencontainers.image.description="PyTorch 2.7.1 (cu126), Python 3.11, debian12, slim flavor; built by imagekit" \
      org.opencontainers.image.title="pytorch-train" \
      org.opencontainers.image.version="2.7.1-cu126-py3.11-debian12-slim"
USER 1000:1000
WORKDIR /workspace
# Sets OMP_NUM_THREADS from the cgroup CPU quota at start unless you set it, then runs CMD.
ENTRYPOINT ["/usr/local/bin/imagekit-entrypoint"]
CMD ["python"]

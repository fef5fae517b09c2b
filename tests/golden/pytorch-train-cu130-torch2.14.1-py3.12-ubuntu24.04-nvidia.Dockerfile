# Rendered by imagekit for cell pytorch-train-cu130-torch2.14.1-py3.12-ubuntu24.04-nvidia (envs/training.yaml:60).
# Do not edit: change envs/ and run `imagekit render`. Build it with `imagekit build`,
# which stages the context (imagekit/, wheelhouse/, source/) and passes the secrets.
#
# Stages, least-changing first:
#   os-base  OS packages and the non-root user
#   builder  os-base + the installer, and the pins of torch and the features
#   runtime  os-base + your apt packages + the environment + your pip packages,
#            then env, labels, source last
#   runtime-amd64, runtime-arm64  what differs by platform (the torch wheel's GPU archs):
#            the runtime is built as runtime-common up to its labels, then on from the stage
#            of the platform BuildKit builds (its TARGETARCH)
#   sbom-tool  the SBOM writer's library, mounted for the runtime stage's SBOM step only

FROM nvidia/cuda:13.0.3-base-ubuntu24.04 AS os-base
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
RUN --mount=type=cache,id=imagekit-apt-cache-ubuntu24.04,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=imagekit-apt-lists-ubuntu24.04,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=tmpfs,target=/tmp \
    touch /tmp/imagekit-started \
    && if [ "$(dpkg-query -W -f '${db:Status-Abbrev}' ca-certificates g++ libpython3.12-dev python3 python3-venv 2>/dev/null)" != "ii ii ii ii ii " ]; then \
         apt-get update \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            -o Dpkg::Options::=--force-unsafe-io \
            ca-certificates \
            g++ \
            libpython3.12-dev \
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
    && /opt/uv/bin/uv venv --python /usr/bin/python3.12 /opt/venv
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
       --torch torch==2.14.1 --torch torchvision==0.29.1 --torch 'nvidia-ml-py>=12.535' \
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

FROM os-base AS runtime-common
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
      ln -s "$entry" /opt/venv/lib/python3.12/site-packages/; \
    done \
    && touch -h -d @315532800 /opt/venv/lib/python3.12/site-packages \
       /opt/venv/lib/python3.12/site-packages/*
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
COPY imagekit/entrypoint.sh /usr/local/bin/imagekit-entrypoint
COPY imagekit/lib/imagekit /opt/venv/lib/python3.12/site-packages/imagekit
# OMP_NUM_THREADS at every start of this venv's Python, also where the entrypoint is replaced.
COPY imagekit/lib/imagekit-threads.pth /opt/venv/lib/python3.12/site-packages/
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
       /run/imagekit/sbom_writer.py --site /opt/venv/lib/python3.12/site-packages \
       --dpkg-status /var/lib/dpkg/status --os-release /etc/os-release \
       --locked /run/imagekit/locked --name pytorch-train-cu130-torch2.14.1-py3.12-ubuntu24.04-nvidia --epoch 315532800 \
       --out /opt/imagekit/sbom.cdx.json \
    && touch -h -d @315532800 /opt /opt/imagekit /opt/imagekit/sbom.cdx.json
ENV PATH=/opt/venv/bin:$PATH VIRTUAL_ENV=/opt/venv
# Tuned defaults from the cell's profile; `docker run -e NAME=...` overrides any of them.
ENV IMAGEKIT_PROFILE="single-node" \
    NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_REQUIRE_CUDA="cuda>=13.0 brand=unknown,driver>=535,driver<536 brand=grid,driver>=535,driver<536 brand=tesla,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536 brand=quadro,driver>=535,driver<536 brand=quadrortx,driver>=535,driver<536 brand=nvidiartx,driver>=535,driver<536 brand=vapps,driver>=535,driver<536 brand=vpc,driver>=535,driver<536 brand=vcs,driver>=535,driver<536 brand=vws,driver>=535,driver<536 brand=cloudgaming,driver>=535,driver<536 brand=unknown,driver>=550,driver<551 brand=grid,driver>=550,driver<551 brand=tesla,driver>=550,driver<551 brand=nvidia,driver>=550,driver<551 brand=quadro,driver>=550,driver<551 brand=quadrortx,driver>=550,driver<551 brand=nvidiartx,driver>=550,driver<551 brand=vapps,driver>=550,driver<551 brand=vpc,driver>=550,driver<551 brand=vcs,driver>=550,driver<551 brand=vws,driver>=550,driver<551 brand=cloudgaming,driver>=550,driver<551 brand=unknown,driver>=565,driver<566 brand=grid,driver>=565,driver<566 brand=tesla,driver>=565,driver<566 brand=nvidia,driver>=565,driver<566 brand=quadro,driver>=565,driver<566 brand=quadrortx,driver>=565,driver<566 brand=nvidiartx,driver>=565,driver<566 brand=vapps,driver>=565,driver<566 brand=vpc,driver>=565,driver<566 brand=vcs,driver>=565,driver<566 brand=vws,driver>=565,driver<566 brand=cloudgaming,driver>=565,driver<566 brand=unknown,driver>=570,driver<571 brand=grid,driver>=570,driver<571 brand=tesla,driver>=570,driver<571 brand=nvidia,driver>=570,driver<571 brand=quadro,driver>=570,driver<571 brand=quadrortx,driver>=570,driver<571 brand=nvidiartx,driver>=570,driver<571 brand=vapps,driver>=570,driver<571 brand=vpc,driver>=570,driver<571 brand=vcs,driver>=570,driver<571 brand=vws,driver>=570,driver<571 brand=cloudgaming,driver>=570,driver<571 brand=unknown,driver>=575,driver<576 brand=grid,driver>=575,driver<576 brand=tesla,driver>=575,driver<576 brand=nvidia,driver>=575,driver<576 brand=quadro,driver>=575,driver<576 brand=quadrortx,driver>=575,driver<576 brand=nvidiartx,driver>=575,driver<576 brand=vapps,driver>=575,driver<576 brand=vpc,driver>=575,driver<576 brand=vcs,driver>=575,driver<576 brand=vws,driver>=575,driver<576 brand=cloudgaming,driver>=575,driver<576" \
    NVIDIA_VISIBLE_DEVICES="all" \
    PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" \
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE="1"
LABEL io.imagekit.archs="7.5 8.0 8.6 9.0 10.0 12.0" \
      io.imagekit.cell="pytorch-train-cu130-torch2.14.1-py3.12-ubuntu24.04-nvidia" \
      io.imagekit.compile="true" \
      io.imagekit.cuda="13.0" \
      io.imagekit.features="" \
      io.imagekit.flavor="nvidia" \
      io.imagekit.forward-branches="535 550 565 570 575" \
      io.imagekit.min-driver="580.65.06" \
      io.imagekit.os="ubuntu24.04" \
      io.imagekit.profile="single-node" \
      io.imagekit.python="3.12" \
      io.imagekit.torch="2.14.1" \
      io.imagekit.variant="cu130" \
      io.imagekit.version="0.1.0" \
      org.opencontainers.image.base.name="nvidia/cuda:13.0.3-base-ubuntu24.04" \
      org.opencontainers.image.description="PyTorch 2.14.1 (cu130), Python 3.12, ubuntu24.04, nvidia flavor; built by imagekit" \
      org.opencontainers.image.title="pytorch-train" \
      org.opencontainers.image.version="2.14.1-cu130-py3.12-ubuntu24.04-nvidia"

# PyTorch compiles its aarch64 wheels for other GPUs than its x86-64 ones: the arm64 image
# carries its own arch list, in its labels and in the self-check's copy of them. BuildKit
# sets TARGETARCH to the platform it builds, so each platform's image is built from its own
# stage below (the other one is never built for it); hadolint cannot see that the last FROM
# names one of these stages, not an untagged image.
FROM runtime-common AS runtime-amd64

FROM runtime-common AS runtime-arm64
LABEL io.imagekit.archs="8.0 9.0 10.0 11.0 12.0"
RUN PYTHONDONTWRITEBYTECODE=1 /opt/venv/bin/python -S -c 'import json, pathlib, sys; path = pathlib.Path("/etc/imagekit/labels.json"); labels = json.loads(path.read_text()); labels.update(zip(sys.argv[1::2], sys.argv[2::2])); path.write_text(json.dumps(labels, indent=2, sort_keys=True) + "\n")' \
      io.imagekit.archs '8.0 9.0 10.0 11.0 12.0' \
    && touch -d @315532800 /etc/imagekit/labels.json

# hadolint ignore=DL3006
FROM runtime-${TARGETARCH} AS runtime
USER 1000:1000
WORKDIR /workspace
# Sets OMP_NUM_THREADS from the cgroup CPU quota at start unless you set it, then runs CMD.
ENTRYPOINT ["/usr/local/bin/imagekit-entrypoint"]
CMD ["python"]

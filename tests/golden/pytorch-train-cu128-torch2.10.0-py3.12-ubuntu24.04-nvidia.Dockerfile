# Rendered by imagekit for cell pytorch-train-cu128-torch2.10.0-py3.12-ubuntu24.04-nvidia (envs/training.yaml:42).
# Do not edit: change envs/ and run `imagekit render`. Build it with `imagekit build`,
# which stages the context (imagekit/, wheelhouse/, source/) and passes the secrets.
#
# Stages, least-changing first:
#   os-base  OS packages and the non-root user
#   builder  the Python environment: installer, torch, features
#   runtime  os-base + your apt packages + the environment + your pip packages,
#            then env, labels, source last
#   sbom-tool  the SBOM writer's library, mounted for the runtime stage's SBOM step only

FROM nvidia/cuda:12.8.1-base-ubuntu24.04 AS os-base
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

FROM nvidia/cuda:12.8.1-devel-ubuntu24.04 AS builder
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 LC_ALL=C.UTF-8
RUN rm -f /etc/apt/apt.conf.d/docker-clean \
    && echo 'Binary::apt::APT::Keep-Downloaded-Packages "true";' > /etc/apt/apt.conf.d/keep-cache
RUN --mount=type=cache,id=imagekit-apt-cache-ubuntu24.04-builder,target=/var/cache/apt,sharing=locked \
    --mount=type=cache,id=imagekit-apt-lists-ubuntu24.04-builder,target=/var/lib/apt/lists,sharing=locked \
    --mount=type=tmpfs,target=/tmp \
    touch /tmp/imagekit-started \
    && if [ "$(dpkg-query -W -f '${db:Status-Abbrev}' build-essential ca-certificates g++ git libpython3.12-dev python3 python3-dev python3-venv 2>/dev/null)" != "ii ii ii ii ii ii ii ii " ]; then \
         apt-get update \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            -o Dpkg::Options::=--force-unsafe-io \
            build-essential \
            ca-certificates \
            g++ \
            git \
            libpython3.12-dev \
            python3 \
            python3-dev \
            python3-venv; \
       fi \
    && for log in /var/log/apt/history.log /var/log/apt/term.log /var/log/dpkg.log \
         /var/log/alternatives.log /var/cache/ldconfig/aux-cache /var/cache/debconf/*-old; do \
         if [ -f "$log" ]; then : > "$log"; fi; \
       done \
    && find / -xdev -cnewer /tmp/imagekit-started -exec touch -h -d @315532800 {} +
# Where torch comes from; `imagekit build --torch-index` overrides it (empty: wheelhouse/PyPI).
ARG TORCH_INDEX_URL=
# Parallel compile jobs for CUDA extensions; empty: the builder's CPUs, and 9 GB of its
# memory per job (build-env.sh, imagekit_max_jobs).
ARG MAX_JOBS=
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
# torch (the heaviest layer; it changes only with the cell)
RUN --mount=type=cache,id=imagekit-uv,target=/root/.cache/uv,sharing=shared \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse --compile-bytecode ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
       torch==2.10.0 \
       torchvision==0.25.0 \
       'nvidia-ml-py>=12.535'
# Build tools for CUDA extensions, which build against the installed torch.
RUN --mount=type=cache,id=imagekit-uv,target=/root/.cache/uv,sharing=shared \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse --compile-bytecode \
       ninja \
       packaging \
       psutil \
       setuptools \
       wheel
# Feature: flash-attn
# Compiled for this cell's GPUs only; a wheel of it in --wheelhouse is used instead.
RUN --mount=type=cache,id=imagekit-uv,target=/root/.cache/uv,sharing=shared \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && imagekit_prebuilt flash-attn > /tmp/imagekit-prebuilt.txt \
    && export TORCH_CUDA_ARCH_LIST="7.0;7.5;8.0;8.6;9.0;10.0;12.0" FLASH_ATTN_CUDA_ARCHS="80;90;100;120" MAX_JOBS="${MAX_JOBS:-$(imagekit_max_jobs)}" \
    && /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse --compile-bytecode --no-build-isolation --constraint /tmp/imagekit-prebuilt.txt \
       'flash-attn>=2.6,<3' \
    && rm /tmp/imagekit-prebuilt.txt
# Feature: onnx-tensorrt
RUN --mount=type=cache,id=imagekit-uv,target=/root/.cache/uv,sharing=shared \
    --mount=type=secret,id=ca \
    --mount=type=secret,id=index \
    --mount=type=bind,source=imagekit/build-env.sh,target=/run/imagekit/build-env.sh \
    --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    . /run/imagekit/build-env.sh \
    && /opt/uv/bin/uv pip install --python /opt/venv/bin/python --find-links /wheelhouse --compile-bytecode \
       'onnx>=1.16' \
       'onnxscript>=0.1' \
       'onnxruntime-gpu>=1.19,<1.27' \
       'tensorrt-cu12>=10.2,<11'

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
COPY --from=builder /opt/venv /opt/venv
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
       --locked /run/imagekit/locked --name pytorch-train-cu128-torch2.10.0-py3.12-ubuntu24.04-nvidia --epoch 315532800 \
       --out /opt/imagekit/sbom.cdx.json \
    && touch -h -d @315532800 /opt /opt/imagekit /opt/imagekit/sbom.cdx.json
ENV PATH=/opt/venv/bin:$PATH VIRTUAL_ENV=/opt/venv
# Tuned defaults from the cell's profile; `docker run -e NAME=...` overrides any of them.
ENV IMAGEKIT_PROFILE="multi-node-ib" \
    NCCL_IB_DISABLE="0" \
    NCCL_SOCKET_IFNAME="^docker,lo" \
    NVIDIA_DRIVER_CAPABILITIES="compute,utility" \
    NVIDIA_REQUIRE_CUDA="cuda>=12.0 brand=unknown,driver>=470,driver<471 brand=grid,driver>=470,driver<471 brand=tesla,driver>=470,driver<471 brand=nvidia,driver>=470,driver<471 brand=quadro,driver>=470,driver<471 brand=quadrortx,driver>=470,driver<471 brand=nvidiartx,driver>=470,driver<471 brand=vapps,driver>=470,driver<471 brand=vpc,driver>=470,driver<471 brand=vcs,driver>=470,driver<471 brand=vws,driver>=470,driver<471 brand=cloudgaming,driver>=470,driver<471 brand=unknown,driver>=535,driver<536 brand=grid,driver>=535,driver<536 brand=tesla,driver>=535,driver<536 brand=nvidia,driver>=535,driver<536 brand=quadro,driver>=535,driver<536 brand=quadrortx,driver>=535,driver<536 brand=nvidiartx,driver>=535,driver<536 brand=vapps,driver>=535,driver<536 brand=vpc,driver>=535,driver<536 brand=vcs,driver>=535,driver<536 brand=vws,driver>=535,driver<536 brand=cloudgaming,driver>=535,driver<536 brand=unknown,driver>=550,driver<551 brand=grid,driver>=550,driver<551 brand=tesla,driver>=550,driver<551 brand=nvidia,driver>=550,driver<551 brand=quadro,driver>=550,driver<551 brand=quadrortx,driver>=550,driver<551 brand=nvidiartx,driver>=550,driver<551 brand=vapps,driver>=550,driver<551 brand=vpc,driver>=550,driver<551 brand=vcs,driver>=550,driver<551 brand=vws,driver>=550,driver<551 brand=cloudgaming,driver>=550,driver<551 brand=unknown,driver>=560,driver<561 brand=grid,driver>=560,driver<561 brand=tesla,driver>=560,driver<561 brand=nvidia,driver>=560,driver<561 brand=quadro,driver>=560,driver<561 brand=quadrortx,driver>=560,driver<561 brand=nvidiartx,driver>=560,driver<561 brand=vapps,driver>=560,driver<561 brand=vpc,driver>=560,driver<561 brand=vcs,driver>=560,driver<561 brand=vws,driver>=560,driver<561 brand=cloudgaming,driver>=560,driver<561 brand=unknown,driver>=565,driver<566 brand=grid,driver>=565,driver<566 brand=tesla,driver>=565,driver<566 brand=nvidia,driver>=565,driver<566 brand=quadro,driver>=565,driver<566 brand=quadrortx,driver>=565,driver<566 brand=nvidiartx,driver>=565,driver<566 brand=vapps,driver>=565,driver<566 brand=vpc,driver>=565,driver<566 brand=vcs,driver>=565,driver<566 brand=vws,driver>=565,driver<566 brand=cloudgaming,driver>=565,driver<566" \
    NVIDIA_VISIBLE_DEVICES="all" \
    PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True" \
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE="1"
LABEL io.imagekit.archs="7.0 7.5 8.0 8.6 9.0 10.0 12.0" \
      io.imagekit.cell="pytorch-train-cu128-torch2.10.0-py3.12-ubuntu24.04-nvidia" \
      io.imagekit.compile="true" \
      io.imagekit.cuda="12.8" \
      io.imagekit.features="flash-attn,onnx-tensorrt" \
      io.imagekit.flavor="nvidia" \
      io.imagekit.forward-branches="470 535 550 560 565" \
      io.imagekit.min-driver="525.60.13" \
      io.imagekit.os="ubuntu24.04" \
      io.imagekit.profile="multi-node-ib" \
      io.imagekit.python="3.12" \
      io.imagekit.torch="2.10.0" \
      io.imagekit.variant="cu128" \
      io.imagekit.version="0.1.0" \
      org.opencontainers.image.base.name="nvidia/cuda:12.8.1-base-ubuntu24.04" \
      org.opencontainers.image.description="PyTorch 2.10.0 (cu128), Python 3.12, ubuntu24.04, nvidia flavor; built by imagekit" \
      org.opencontainers.image.title="pytorch-train" \
      org.opencontainers.image.version="2.10.0-cu128-py3.12-ubuntu24.04-nvidia"
USER 1000:1000
WORKDIR /workspace
# Sets OMP_NUM_THREADS from the cgroup CPU quota at start unless you set it, then runs CMD.
ENTRYPOINT ["/usr/local/bin/imagekit-entrypoint"]
CMD ["python"]

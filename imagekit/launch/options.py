"""What a launch needs, checked once: the cell's image (pinned when the lock has a digest),
nodes, GPUs, the profile's NCCL environment, /dev/shm, RDMA, the self-check and the command.

Every check of the user's input lives here and raises UsageError (exit 2) naming the option,
the value and the fix, so the writers in kubernetes.py and slurm.py only format text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from imagekit.contract.check_table import ORDER
from imagekit.errors import UsageError
from imagekit.matrix.cells import Cell
from imagekit.matrix.profiles import PROFILE_ENV, PROFILE_SHM, RDMA_PROFILES
from imagekit.matrix.ref_checks import check_image_ref, pinned
from imagekit.platforms import AMD64, PLATFORMS
from imagekit.sizes import QUANTITY, quantity_kib

KINDS = {"kubernetes": ("trainjob", "jobset"), "slurm": ("pyxis", "apptainer")}  # by --scheduler
KNOWN_CHECKS = ORDER
# A few minutes on every node: the stack, the GPUs the node should have and their health,
# their speed, NCCL across the node's GPUs, and the links between them.
DEFAULT_CHECKS = ("stack", "gpus", "health", "perf", "ddp", "links")
CPU_CHECKS = ("stack", "ddp")  # a CPU job's nodes have no GPU to check
DEFAULT_RDMA = "rdma/ib"  # the NVIDIA network operator's shared RDMA device plugin
RDZV_PORT = 29500  # Kubeflow Trainer's trainer port; torchrun's default too
# Names --env may not set, each family with why. The values are exported by the sbatch script
# itself (then srun, apptainer and scontrol inherit them on the host) and set in the
# container, where bash runs the preflight: a name either reads is not the user's to set.
RESERVED_FAMILIES: tuple[tuple[re.Pattern[str], str, str], ...] = tuple(
    (re.compile(pattern), why, fix)
    for pattern, why, fix in [
        # bash's own: readonly (UID, EUID, PPID, SHELLOPTS, BASHOPTS: "readonly variable" at
        # run time), or changing how every later line is read or run: BASH_ENV and ENV name a
        # file bash sources on start, IFS splits words, PS4 is expanded by xtrace, CDPATH
        # and GLOBIGNORE change cd and globs, PATH which srun and apptainer run
        (r"UID|EUID|PPID|SHELLOPTS|BASHOPTS|BASH|BASH_.*|IFS|PS4|ENV|CDPATH|GLOBIGNORE|PATH",
         "the shell's own (readonly, or it changes how the script's lines are read or which "
         "programs run)", "leave it out; set it in the image if the program needs it"),
        # the dynamic loader's: exported by the script they reach srun, apptainer and scontrol
        # on the host, not only the container, and they replace the image's library path
        (r"LD_.*", "the dynamic loader's: it would reach srun, apptainer and scontrol on the "
         "host too", "set it in the image (ENV), or in a wrapper the COMMAND runs"),
        # the scheduler's: srun reads its options from SLURM_*/SRUN_* (SLURM_NNODES is -N),
        # the script reads the allocation from SLURM_* (torchrun's --nnodes, the head node),
        # SBATCH_*/SALLOC_* are sbatch's and salloc's options, SLURMD_NODENAME names the node
        # --drain-on-fail drains
        (r"SLURM_.*|SLURMD_.*|SRUN_.*|SBATCH_.*|SALLOC_.*",
         "the scheduler's: srun and the script read the allocation and their options from it "
         "(SLURM_NNODES is torchrun's node count)",
         "pass sbatch or srun options when you submit (sbatch -N 2 FILE), not --env"),
        # the process managers' wire-up between srun and the ranks (PMI, PMIx, Open MPI)
        (r"PMI_.*|PMIX_.*|OMPI_.*", "the process manager's wire-up between srun and the ranks",
         "leave it out; Slurm sets it for each task"),
        # the container runtimes' own configuration, read from the environment
        (r"APPTAINER_.*|APPTAINERENV_.*|SINGULARITY_.*|SINGULARITYENV_.*|ENROOT_.*",
         "the container runtime's configuration (binds, images, what the container sees)",
         "configure the runtime on the cluster, not through the job's environment"),
        # imagekit's: IMAGEKIT_LAUNCHER replaces the container with a command of its own, and
        # the sbatch script's own variables are imagekit_* (an exported value of the same
        # name would be overwritten by the script, or lost when it becomes an array)
        (r"(?i:IMAGEKIT_.*)", "imagekit's own (IMAGEKIT_LAUNCHER replaces the container; the "
         "launch script's variables are imagekit_*)",
         "set it in the environment you submit from, or pick another name"),
        # torchrun's rendezvous: the Trainer injects it and rejects a TrainJob that sets it;
        # imagekit sets it itself for JobSet and Slurm
        (r"PET_.*|MASTER_ADDR|MASTER_PORT|WORLD_SIZE|RANK|LOCAL_RANK",
         "torchrun's rendezvous, which the launch file sets from the job", "leave it out"),
    ]
)  # fmt: skip
# What --rdma-resource is for: an RDMA device plugin's extended resource. Those carry a
# domain (rdma/ib, rdma/hca_shared_devices_a from the k8s-rdma-shared-dev-plugin,
# nvidia.com/hostdev and nvidia.com/rdma_shared_device_a from the NVIDIA network operator,
# openshift.io/mlnxnics from the SR-IOV operator); a name without one is Kubernetes' own
# (cpu, memory, ephemeral-storage, hugepages-2Mi), as is the kubernetes.io domain, and the
# GPU's resource is --gpus-per-node's: a pod that asked for it here would lose its GPUs.
_NATIVE_DOMAIN = re.compile(r"(.+\.)?kubernetes\.io|k8s\.io|requests|limits")
_GPU_RESOURCE = re.compile(r"gpu|gpu[-.].*|.*[-.]gpu|mig-.*|i915|xe", re.I)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A Slurm partition name as sbatch's --partition takes one: letters, digits, _ . - (a space,
# a comma (sbatch's list of partitions) or a control character would change the directive).
_PARTITION = re.compile(r"[A-Za-z0-9_.-]+")
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESOURCE = re.compile(
    r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


@dataclass(frozen=True)
class LaunchOptions:
    """The command line, as given (None: take the default of the cell or profile)."""

    scheduler: str
    nodes: int
    gpus_per_node: int
    command: tuple[str, ...]
    kind: str | None = None
    profile: str | None = None
    name: str | None = None
    namespace: str | None = None
    image: str | None = None
    env: tuple[str, ...] = ()
    shm_size: str | None = None
    rdma_resource: str | None = None
    checks: str | None = None
    drain_on_fail: bool = False
    platform: str | None = None
    partition: str | None = None


@dataclass(frozen=True)
class LaunchSpec:
    """Everything the writers need, validated. `image` is name:tag or name:tag@sha256:..."""

    scheduler: str
    kind: str
    name: str
    namespace: str | None
    cell_id: str
    image: str
    nodes: int
    gpus_per_node: int
    command: tuple[str, ...]
    profile: str
    env: tuple[tuple[str, str], ...]
    shm_size: str
    rdma: tuple[str, int] | None  # (resource name, count per node)
    checks: tuple[str, ...]
    port: int = RDZV_PORT
    drain_on_fail: bool = False  # Slurm: a node whose preflight fails drains itself
    platform: str | None = None  # the nodes' platform; None: any of the image's
    platforms: tuple[str, ...] = (AMD64,)  # the image's, in PLATFORMS order
    partition: str | None = None  # Slurm: #SBATCH --partition

    @property
    def node_platforms(self) -> tuple[str, ...]:
        """The platforms the job's nodes may have: the one selected, else any of the image's."""
        return (self.platform,) if self.platform else self.platforms

    @property
    def procs_per_node(self) -> int:
        # A CPU job still needs one process per node.
        return max(1, self.gpus_per_node)

    @property
    def locked_memory(self) -> bool:
        return self.profile in RDMA_PROFILES

    @property
    def shm_kib(self) -> int:
        return quantity_kib(self.shm_size)

    def selfcheck_argv(self) -> tuple[str, ...]:
        """The self-check each node runs before training; empty when --checks none."""
        if not self.checks:
            return ()
        argv = ("python", "-m", "imagekit.selfcheck", "--checks", ",".join(self.checks))
        if not self.gpus_per_node:
            return argv
        # A node whose GPUs are not visible must fail here, not train on the CPU; one that
        # shows fewer GPUs than the job asked for fails the gpus check.
        return (*argv, "--require", "gpu", "--expect-gpus", str(self.gpus_per_node))


def build(cell: Cell, pins: Mapping[str, str], opts: LaunchOptions) -> LaunchSpec:
    """Check the options against the cell; UsageError on the first bad one."""
    _check_counts(opts)
    profile = opts.profile or cell.profile
    return LaunchSpec(
        scheduler=opts.scheduler,
        kind=_kind(opts.scheduler, opts.kind),
        name=_name(opts.name or default_name(cell), opts.nodes),
        namespace=_namespace(opts.scheduler, opts.namespace),
        cell_id=cell.id,
        image=image_ref(opts.image or cell.tags[0], pins),
        nodes=opts.nodes,
        gpus_per_node=opts.gpus_per_node,
        command=_command(opts.command),
        profile=profile,
        env=_env(profile, opts.env),
        shm_size=_shm(opts.shm_size or PROFILE_SHM[profile]),
        rdma=_rdma(profile, opts.rdma_resource),
        checks=_checks(opts.checks, opts.gpus_per_node),
        drain_on_fail=_drain(opts),
        platform=_platform(cell, opts.platform),
        platforms=cell.platforms,
        partition=_partition(opts.scheduler, opts.partition),
    )


def default_name(cell: Cell) -> str:
    """train-cu128-torch2-10-0-py3-12: a DNS label, the same for every run of a cell."""
    return f"train-{cell.variant}-torch{cell.torch}-py{cell.python}".replace(".", "-").lower()


def image_ref(ref: str, pins: Mapping[str, str]) -> str:
    """`ref`, plus @digest when the lock pins it (a pinned ref is taken as it is)."""
    try:
        check_image_ref(ref)
    except ValueError as exc:
        raise UsageError(f"--image {ref}: {exc}") from None
    return pinned(ref, pins)


def _check_counts(opts: LaunchOptions) -> None:
    if opts.nodes < 1:
        raise UsageError(f"--nodes {opts.nodes}: must be 1 or more (machines in the job)")
    if opts.gpus_per_node < 0:
        raise UsageError(
            f"--gpus-per-node {opts.gpus_per_node}: must be 0 (CPU) or more "
            "(GPUs per machine; torchrun starts one process per GPU)"
        )
    if not opts.command:
        raise UsageError(
            "no COMMAND: put torchrun's script and its arguments after `--`, "
            "e.g. `imagekit launch ... -- train.py --epochs 3` or `-- -m pkg.train`"
        )


def _command(command: tuple[str, ...]) -> tuple[str, ...]:
    """Every word reaches the program as written (YAML escapes, `$$` for Kubernetes, bash
    quoting for Slurm), control characters included; what no launcher can carry is refused:
    NUL, which ends a word of argv, and text that is not UTF-8 (a manifest is UTF-8 JSON)."""
    for number, word in enumerate(command, 1):
        if "\0" in word or not _is_utf8(word):
            raise UsageError(
                f"COMMAND word {number} {word!r}: holds a NUL byte or is not UTF-8 text, "
                "which no launcher can pass to the program; write it as UTF-8 text"
            )
    return command


def _is_utf8(text: str) -> bool:
    # Bytes that are not UTF-8 reach Python as lone surrogates (surrogateescape).
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _kind(scheduler: str, kind: str | None) -> str:
    kinds = KINDS[scheduler]
    if kind is None:
        return kinds[0]
    if kind not in kinds:
        raise UsageError(f"--kind {kind}: not a {scheduler} kind; choose one of {', '.join(kinds)}")
    return kind


def _name(name: str, nodes: int) -> str:
    # The last pod's hostname, <name>-node-0-<nodes-1>, must be a DNS label of 63 characters.
    longest = 63 - len(f"-node-0-{nodes - 1}")
    if not _DNS_LABEL.fullmatch(name) or len(name) > longest:
        raise UsageError(
            f"--name {name}: must be lowercase letters, digits and '-', start with a letter, "
            f"and have at most {longest} characters with {nodes} nodes (pod hostnames "
            "are <name>-node-0-<index>)"
        )
    return name


def _namespace(scheduler: str, namespace: str | None) -> str | None:
    if namespace is None:
        return None
    if scheduler != "kubernetes":
        raise UsageError(f"--namespace {namespace}: only for --scheduler kubernetes")
    if not _DNS_LABEL.fullmatch(namespace) or len(namespace) > 63:
        raise UsageError(f"--namespace {namespace}: not a Kubernetes namespace name")
    return namespace


def _env(profile: str, extra: Sequence[str]) -> tuple[tuple[str, str], ...]:
    env = dict(PROFILE_ENV[profile])
    for item in extra:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.fullmatch(name):
            raise UsageError(f"--env {item}: write NAME=VALUE, e.g. --env NCCL_IB_HCA=mlx5")
        if _CONTROL.search(value):  # a newline would start a line of the script its own
            raise UsageError(f"--env {name}=...: the value holds a control character; one line")
        if not _is_utf8(value):
            raise UsageError(f"--env {name}=...: the value is not UTF-8 text; write it as UTF-8")
        for pattern, why, fix in RESERVED_FAMILIES:
            if pattern.fullmatch(name):
                raise UsageError(f"--env {item}: {name} is {why}; {fix}")
        env[name] = value
    return tuple(sorted(env.items()))


def _shm(size: str) -> str:
    if not QUANTITY.fullmatch(size):
        raise UsageError(f"--shm-size {size}: write a whole number of Mi, Gi or Ti, e.g. 64Gi")
    return size


def _rdma(profile: str, resource: str | None) -> tuple[str, int] | None:
    if resource == "none" or (resource is None and profile not in RDMA_PROFILES):
        return None
    if profile not in RDMA_PROFILES:
        raise UsageError(
            f"--rdma-resource {resource}: profile {profile} sends NCCL over TCP "
            "(NCCL_IB_DISABLE=1); use --profile multi-node-ib for RDMA"
        )
    name, sep, count = (resource or DEFAULT_RDMA).partition("=")
    if not _RESOURCE.fullmatch(name) or (sep and not (count.isdigit() and int(count) > 0)):
        raise UsageError(
            f"--rdma-resource {resource}: write a device-plugin resource, optionally with a "
            "count per node, e.g. rdma/ib or nvidia.com/hostdev=8 (or none)"
        )
    _check_rdma_name(resource or DEFAULT_RDMA, name)
    return name, int(count) if sep else 1


def _check_rdma_name(resource: str, name: str) -> None:
    domain, slash, plain = name.rpartition("/")
    why = ""
    if not slash:
        why = f"{name} is one of Kubernetes' own resources, not a device plugin's"
    elif _NATIVE_DOMAIN.fullmatch(domain):
        why = f"{domain}/ is Kubernetes' own domain, not a device plugin's"
    elif _GPU_RESOURCE.fullmatch(plain) or "gpu" in domain.lower().split("."):
        why = f"{name} is a GPU resource, which --gpus-per-node sets (this would replace it)"
    if why:
        raise UsageError(
            f"--rdma-resource {resource}: {why}; name the RDMA device plugin's resource, "
            "e.g. rdma/ib, rdma/hca_shared_devices_a or nvidia.com/hostdev=8 (or none)"
        )


def _checks(text: str | None, gpus_per_node: int) -> tuple[str, ...]:
    if text is None:
        return DEFAULT_CHECKS if gpus_per_node else CPU_CHECKS
    if text == "none":
        return ()
    names = tuple(n for n in text.split(",") if n)
    unknown = [n for n in names if n not in KNOWN_CHECKS]
    if unknown or not names:
        raise UsageError(
            f"--checks {text}: choose from {', '.join(KNOWN_CHECKS)} (comma list), or none"
        )
    return names


def _drain(opts: LaunchOptions) -> bool:
    if not opts.drain_on_fail:
        return False
    if opts.scheduler != "slurm":
        raise UsageError(
            "--drain-on-fail: only for --scheduler slurm; on Kubernetes a failed preflight fails "
            "the pod, and tainting bad nodes is the GPU operator's health checks' job"
        )
    if opts.checks == "none":
        raise UsageError("--drain-on-fail with --checks none: there is no preflight to fail")
    return True


def _platform(cell: Cell, platform: str | None) -> str | None:
    """The given platform, which the image must have; else the image's only one. An image of
    several platforms runs on any of them, so nothing is pinned unless asked."""
    if platform is None:
        return cell.platforms[0] if len(cell.platforms) == 1 else None
    if platform not in PLATFORMS:
        raise UsageError(f"--platform {platform}: choose one of {', '.join(PLATFORMS)}")
    if platform not in cell.platforms:
        raise UsageError(
            f"--platform {platform}: cell {cell.id}'s image is built for "
            f"{', '.join(cell.platforms)} only; add {platform} to the cell's `platform:` in "
            "envs/*.yaml and rebuild, or pick another cell"
        )
    return platform


def _partition(scheduler: str, partition: str | None) -> str | None:
    if partition is None:
        return None
    if scheduler != "slurm":
        raise UsageError(
            f"--partition {partition}: only for --scheduler slurm; on Kubernetes pick the nodes' "
            "architecture with --platform (a kubernetes.io/arch node selector), other node "
            "pools with the cluster's node selectors"
        )
    if not _PARTITION.fullmatch(partition):
        shown = partition if partition.isprintable() else repr(partition)
        raise UsageError(
            f"--partition {shown}: not a Slurm partition name; write one name of letters, "
            "digits, '_', '.' and '-' (no spaces, commas or control characters), e.g. gpu-arm64"
        )
    return partition

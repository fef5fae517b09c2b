#!/bin/bash
# A one-node Slurm cluster on this machine, for the slow test of `imagekit launch --scheduler slurm`
# (tests/real/test_launch_slurm.py). Debian 12's slurm-wlm (22.05) and munge, run as root without
# systemd; the node is this host. Idempotent: a running cluster is left as it is.
#   sudo .ci/slurm-one-node.sh          # install if missing, configure, start
#   sudo .ci/slurm-one-node.sh stop
set -euo pipefail

if [[ "${1:-}" == stop ]]; then
  for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
    if [[ -f "$pidfile" ]]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
  done
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge
fi

host=$(hostname -s)
mkdir -p /etc/slurm /var/lib/slurm/slurmd /var/lib/slurm/slurmctld /var/log/slurm /run/munge
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=imagekit
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmdSpoolDir=/var/lib/slurm/slurmd
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

if ! pgrep -x munged >/dev/null; then
  chown munge:munge /run/munge
  runuser -u munge -- /usr/sbin/munged
fi
if ! scontrol ping 2>/dev/null | grep -q UP; then
  slurmctld
fi
if ! pgrep -x slurmd >/dev/null; then
  slurmd
fi
for _ in $(seq 30); do
  if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
    echo "slurm: node $host idle"
    exit 0
  fi
  sleep 1
done
echo "slurm: node $host did not become idle; see /var/log/slurm/" >&2
sinfo >&2 || true
exit 1

#!/bin/bash
# The HPC stage of CI: the launch scripts against a real SLURM (Debian's slurm-wlm + munge) and a real Open MPI.
# Installs what is missing (Debian packages; mpi4py from PyPI), starts munged, slurmctld and a slurmd per node with
# their configuration in a temporary folder (cluster.sh: two CPU nodes, each in network and UTS namespaces of its
# own, and this machine as a fake-GPU node), runs the tests marked hpc, and stops the daemons by PID.
#
#   bash tests/hpc/run_stage.sh            # every HPC test
#   bash tests/hpc/run_stage.sh -k mpirun  # pytest options after the script's name
#
# On Debian or Ubuntu, as root (the daemons run as root; a user with sudo is taken there with their environment).
set -euo pipefail
if (( EUID != 0 )); then
    exec sudo -E bash "${BASH_SOURCE[0]}" "$@"
fi
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
repo=$PWD

as_root() { "$@"; }
missing=()
command -v sbatch >/dev/null && command -v slurmctld >/dev/null && command -v slurmd >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null || missing+=(munge)
command -v mpirun >/dev/null || missing+=(openmpi-bin)
command -v ip >/dev/null && command -v tc >/dev/null || missing+=(iproute2)  # the two nodes' namespaces (cluster.sh), a slow link (tc)
dpkg-query -W -f='${Status}' libopenmpi-dev 2>/dev/null | grep -q "ok installed" \
    || missing+=(libopenmpi-dev)  # mpi4py builds against it where no wheel fits
if (( ${#missing[@]} )); then
    echo "hpc stage: installing ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [[ ! -s /etc/munge/munge.key ]]; then
    as_root mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null \
        || as_root dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
python3 -c 'import mpi4py' 2>/dev/null || python3 -m pip install --quiet "mpi4py>=3.1"

source "$repo/tests/hpc/cluster.sh"
dir=$(mktemp -d "${TMPDIR:-/tmp}/megamlm-hpc.XXXXXX")
chmod 755 "$dir"
trap 'cluster_down; rm -rf "$dir"' EXIT
cluster_up "$dir"
echo "hpc stage: SLURM cluster up in $dir ($(sinfo -h -N -o '%N %P %c CPUs %G' | paste -sd ';' -))"
export MEGAMLM_HPC_CLUSTER=$dir MEGAMLM_HPC_TWO_NODES=$HPC_TWO_NODES
python3 -m pytest -p no:cacheprovider -m hpc tests/hpc -q "$@"

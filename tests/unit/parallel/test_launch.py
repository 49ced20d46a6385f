"""Rank, world size and master address from torchrun, SLURM and MPI launchers; the process group's backends."""

import pytest
import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import BackendConfig

from megamlm.launcher_env import world_size_from_env
from megamlm.parallel.launch import (
    LaunchError,
    backend_for,
    collective_device_for,
    first_slurm_host,
    torch_env_vars,
)


def no_mpi4py():
    return None


def test_plain_process_has_no_launcher():
    assert torch_env_vars({}) == {}
    assert world_size_from_env({}) == 1


def test_torchrun_variables_pass_through():
    env = {"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "1234"}
    assert torch_env_vars(env) == env


def test_open_mpi_maps_to_torch_names():
    env = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
           "MASTER_ADDR": "head"}
    assert torch_env_vars(env, no_mpi4py) == {"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1",
                                             "MASTER_ADDR": "head", "MASTER_PORT": "29500"}
    assert world_size_from_env(env) == 16


def test_mpich_pmi_uses_mpi4py_for_the_master_address():
    env = {"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0"}
    out = torch_env_vars(env, lambda: "rank0-host")
    assert (out["RANK"], out["WORLD_SIZE"], out["MASTER_ADDR"]) == ("2", "4", "rank0-host")


def test_mpi_without_master_address_or_mpi4py_names_the_fix():
    with pytest.raises(LaunchError, match="export MASTER_ADDR"):
        torch_env_vars({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, no_mpi4py)


def test_bare_srun_takes_the_first_node_as_master():
    env = {"SLURM_PROCID": "7", "SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3",
           "SLURM_JOB_NODELIST": "gpu[012-015]"}
    out = torch_env_vars(env)
    assert out == {"RANK": "7", "WORLD_SIZE": "8", "LOCAL_RANK": "3", "MASTER_ADDR": "gpu012", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("nodelist, first", [("node1", "node1"), ("gpu[3,5-7]", "gpu3"), ("a[01-02],b1", "a01"),
                                             ("x-y[10-11]", "x-y10")])
def test_first_slurm_host(nodelist, first):
    assert first_slurm_host(nodelist) == first


def test_a_batch_script_outside_srun_is_a_single_process():
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_NODELIST": "gpu[012-015]"}
    assert torch_env_vars(env) == {} and world_size_from_env(env) == 1


def test_rank_without_size_is_not_a_launcher():
    assert world_size_from_env({"OMPI_COMM_WORLD_SIZE": "4"}) == 1


def test_a_gpu_job_reduces_device_tensors_with_nccl_and_host_numbers_with_gloo():
    assert BackendConfig(dist.Backend(backend_for("cuda"))).get_device_backend_map() == {"cuda": "nccl", "cpu": "gloo"}
    assert backend_for("cpu") == "gloo"


def test_host_numbers_stay_on_the_cpu_unless_the_group_has_no_cpu_backend(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert collective_device_for(backend_for("cuda"), cuda_available=True) == torch.device("cpu")
    assert collective_device_for("gloo", cuda_available=True) == torch.device("cpu")
    assert collective_device_for("nccl", cuda_available=False) == torch.device("cpu")
    # A group started elsewhere with nccl alone reduces only CUDA tensors (the host then waits for the device).
    assert collective_device_for("nccl", cuda_available=True) == torch.device("cuda", 3)

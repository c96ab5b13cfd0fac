"""Misspelled variables: ``tfboot check`` fails naming the name meant, the import warns
once, and nothing else in the environment is judged."""

from __future__ import annotations

import json

from support import run_module, run_python
from tfboot.typos import misspelled

# What a container or a Slurm step has beside the contract: none of it is judged.
ORDINARY = ["PATH", "HOME", "HOSTNAME", "LANG", "PYTHONPATH", "LD_LIBRARY_PATH",
            "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
            "MKL_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
            "LOCAL_WORLD_SIZE", "JOB_COMPLETION_INDEX", "TF_CPP_MIN_LOG_LEVEL", "XLA_FLAGS",
            "JAX_PLATFORMS", "NCCL_DEBUG", "KERAS_BACKEND", "SLURM_CPUS_PER_TASK",
            "SLURM_STEP_ID", "PET_NNODES", "TORCH_HOME", "HF_HOME", "MEMORY_LIMIT",
            "XLA_PYTHON_CLIENT_MEM_FRACTION", "TF_FORCE_GPU_ALLOW_GROWTH", "KUBERNETES_PORT",
            "TF_CONFIG", "TFBOOT_TASK", "TFBOOT_WROTE", "TFBOOT_LOG", "MEMORY_LIMIT_MB",
            "DIST_HOSTS", "lower_case_name"]  # fmt: skip


def test_a_name_close_to_the_contract_s_is_named_with_the_one_meant() -> None:
    found = dict(misspelled([*ORDINARY, "MEMORY_LIMT_MB", "VISIBLE_GPUS", "DIST_HOST",
                             "TFBOOT_LOGG", "TFBOOT_FOO"]))  # fmt: skip
    assert found == {
        "MEMORY_LIMT_MB": "MEMORY_LIMT_MB is not a tfboot variable: did you mean "
                          "MEMORY_LIMIT_MB? (not applied)",
        "VISIBLE_GPUS": "VISIBLE_GPUS is not a tfboot variable: did you mean VISIBLE_GPU? "
                        "(not applied)",
        "DIST_HOST": "DIST_HOST is not a tfboot variable: did you mean DIST_HOSTS? (not applied)",
        "TFBOOT_LOGG": "TFBOOT_LOGG is not one of tfboot's variables: did you mean "
                       "TFBOOT_LOG? (not applied)",
        "TFBOOT_FOO": found["TFBOOT_FOO"],
    }  # fmt: skip
    assert found["TFBOOT_FOO"].startswith("TFBOOT_FOO is not one of tfboot's variables: "
                                          "tfboot's are TFBOOT_DISABLE, ")  # fmt: skip
    assert misspelled(ORDINARY) == []


def test_check_fails_on_a_typo_without_showing_its_value() -> None:
    env = {"MEMORY_LIMT_MB": "secret-4096"}
    done = run_module(["tfboot", "check"], env)
    assert done.returncode == 1 and done.stdout == "", done
    assert done.stderr == (
        "tfboot: error: MEMORY_LIMT_MB is not a tfboot variable: did you mean MEMORY_LIMIT_MB? "
        "(not applied): rename it to the variable meant, or remove it\n"
    )
    as_json = run_module(["tfboot", "check", "--json"], env)
    found = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and found["ok"] is False
    assert [p["variable"] for p in found["problems"]] == ["MEMORY_LIMT_MB"]
    assert "secret" not in as_json.stdout + done.stderr
    assert run_module(["tfboot", "check"], {"MEMORY_LIMIT_MB": "4096"}).returncode == 0


def test_the_import_warns_once_per_process_and_quiet_silences_it() -> None:
    env = {"MEMORY_LIMT_MB": "4096", "CPU_THREADS": "1"}
    done = run_python("import torch, jax", env)
    warned = [x for x in done.stderr.splitlines() if "MEMORY_LIMT_MB" in x]
    assert done.returncode == 0 and warned == [
        "tfboot: warning: MEMORY_LIMT_MB is not a tfboot variable: did you mean "
        "MEMORY_LIMIT_MB? (not applied)"
    ], done.stderr
    quiet = run_python("import torch", {**env, "TFBOOT_LOG": "quiet"})
    assert "MEMORY_LIMT_MB" not in quiet.stderr


def test_tfboot_s_own_internal_names_are_never_judged() -> None:
    """The names tfboot sets between its own processes, at their homes."""
    from tfboot.cluster.engines import TASK
    from tfboot.kube.template import CONTAINER_ENV
    from tfboot.typos import INTERNAL
    from tfboot.usage.job import RUN

    assert {TASK, CONTAINER_ENV, RUN} <= INTERNAL
    assert misspelled(INTERNAL) == []

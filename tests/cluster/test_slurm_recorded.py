"""The Slurm builder replayed over what real ``srun``, ``sbatch`` and ``salloc`` set.

``tests/testdata/slurm/`` holds every task's ``SLURM_*`` variables from real Slurm 22.05
(recorded by ``tests/slurm/record.py`` on nodes node9, node10, node11). Each task where
srun really ran it says where it ran (``SLURMD_NODENAME``, ``SLURM_LOCALID``): the
``TF_CONFIG`` it builds must name that place as its own address, at its rank, and every
task of a step must build the same cluster, or all must refuse alike.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import REPO, cluster_plan
from tfboot import ConfigError
from tfboot.cluster.engines.slurm import slurm_port

RECORDED = REPO / "tests" / "testdata" / "slurm"
STEPS = sorted(
    p for p in RECORDED.glob("*.json") if "shell" not in p.name and "batch-step" not in p.name
)
OUTSIDE = sorted(p for p in RECORDED.glob("*.json") if p not in STEPS)


def tasks(path: Path) -> list[dict[str, str]]:
    return json.loads(path.read_text())["tasks"]


@pytest.mark.parametrize(
    "path", [p for p in STEPS if "arbitrary" not in p.name], ids=lambda p: p.stem
)
def test_every_task_builds_the_cluster_srun_really_placed(path: Path) -> None:
    clusters = set()
    for env in tasks(path):
        plan = cluster_plan("slurm", env)
        config = plan.identity.cluster
        rank = int(env["SLURM_PROCID"])
        base = slurm_port(env)[0]
        where = f"{env['SLURMD_NODENAME']}:{base + int(env['SLURM_LOCALID'])}"
        assert (config.task_type, config.task_index, config.address) == ("worker", rank, where)
        clusters.add(json.dumps(config.cluster))
    assert len(clusters) == 1 and len(json.loads(clusters.pop())["worker"]) == len(tasks(path))


def test_an_arbitrary_layout_is_refused_by_every_rank_alike() -> None:
    messages = set()
    for env in tasks(RECORDED / "srun-n3-arbitrary.json"):
        with pytest.raises(ConfigError) as info:
            cluster_plan("slurm", env)
        messages.add(str(info.value))
    (message,) = messages
    assert message.startswith("SLURM_DISTRIBUTION='arbitrary' is invalid: expected block")
    assert "--distribution=block (the default), cyclic or plane=N" in message


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: p.stem)
def test_the_batch_script_and_the_allocation_shell_are_no_task(path: Path) -> None:
    (env,) = tasks(path)
    plan = cluster_plan("slurm", env)
    assert plan.identity.cluster is None and plan.environ.get("TF_CONFIG") is None
    job = env["SLURM_JOB_ID"]
    assert plan.line() == (
        f"cluster: single node (the batch script or allocation of Slurm job {job}, outside "
        "srun); nothing set"
    )


def test_a_chief_and_workers_fill_ranks_in_srun_s_order() -> None:
    found = {}
    recorded = tasks(RECORDED / "srun-N2-n3-cyclic.json")
    for env in recorded:
        config = cluster_plan("slurm", {**env, "DIST_TASKS": "chief=1,worker=2"}).identity.cluster
        found[int(env["SLURM_PROCID"])] = (config.task_type, config.task_index, config.address)
    base = slurm_port(recorded[0])[0]
    assert found == {
        0: ("chief", 0, f"node9:{base}"),
        1: ("worker", 0, f"node10:{base}"),
        2: ("worker", 1, f"node9:{base + 1}"),
    }

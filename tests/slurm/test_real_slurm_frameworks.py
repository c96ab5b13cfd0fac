"""PyTorch, JAX and Keras 3 under a real Slurm: one ``srun`` line, whatever the framework.

The steps run ``tests/cluster/dp_train.py``, which forms its group with no arguments
(``init_process_group("gloo")``, ``jax.distributed.initialize()``,
``keras.distribution.initialize()``), configured only by ``DISTRIBUTED=slurm``: every rank
must end with the weights of one process trained alone. JAX detects Slurm itself too;
its own reading of the step must agree with tfboot's, rank for rank.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support import REPO, scenario_env
from test_real_slurm import srun
from tfboot.cluster.engines import PORT_BLOCK, PORTS

if TYPE_CHECKING:  # the fixture's type; conftest is not a module to import at run time
    from conftest import Slurm

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TRAIN = REPO / "tests" / "cluster" / "dp_train.py"
PYTHON = sys.executable
# JAX's own Slurm detection beside the values tfboot gave jax.distributed.initialize.
AGREE = """
import json
import jax
from jax._src.clusters import SlurmCluster
from tfboot.executor import _results

ours = _results["jax"].plan.cluster.launch
theirs = {
    "coordinator": SlurmCluster.get_coordinator_address(None, None),
    "count": SlurmCluster.get_process_count(),
    "id": SlurmCluster.get_process_id(),
    "local": SlurmCluster.get_local_process_id(),
}
print(json.dumps({"theirs": theirs, "ours": ours.to_dict()}))
"""


def reference(framework: str) -> list[float]:
    done = subprocess.run(
        [PYTHON, str(TRAIN), framework, "single"],
        env=scenario_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])["weights"]


def succeeded(done: subprocess.CompletedProcess[str], folder: Path, count: int) -> list[str]:
    """Each task's whole stderr, once the step is known to have ended with status 0; a failed
    step prints them all first (pytest shows a failed test's output whole, where an
    assertion's message is cut)."""
    errors = [(folder / f"task-{rank}.err").read_text() for rank in range(count)]
    if done.returncode != 0:
        print(done.stderr)
        for rank, text in enumerate(errors):
            print(f"--- task {rank}'s stderr\n{text}")
    assert done.returncode == 0, f"the step ended with status {done.returncode}"
    return errors


def results(folder: Path, count: int) -> list[dict]:
    return [
        json.loads((folder / f"task-{rank}.out").read_text().splitlines()[-1])
        for rank in range(count)
    ]


@pytest.mark.parametrize(
    ("framework", "options", "local"),
    [
        ("torch", ["-N2", "-n3"], [["0", "2"], ["1", "2"], ["0", "1"]]),
        ("torch", ["-N2", "-n4", "--distribution=cyclic"], [["0", "2"], ["0", "2"],
                                                            ["1", "2"], ["1", "2"]]),
        ("jax", ["-N2", "-n3"], None),
        ("jax", ["-N2", "-n4", "--distribution=cyclic"], None),
        ("keras", ["-N2", "-n3"], None),
    ],
)  # fmt: skip
def test_one_srun_line_forms_the_group(
    slurm: Slurm, tmp_path: Path, framework: str, options: list[str], local: list | None
) -> None:
    extra = {"DISTRIBUTED": "slurm", "CPU_THREADS": "1", "DIST_STARTUP_TIMEOUT": "120",
             "DIST_REPLICAS_PER_WORKER": "1"}  # fmt: skip
    done = srun(slurm, tmp_path, [*options, "--kill-on-bad-exit=1"], extra, TRAIN, framework,
                "multi")  # fmt: skip
    count = 4 if "-n4" in options else 3
    succeeded(done, tmp_path, count)
    found = results(tmp_path, count)
    assert [f["rank"] for f in found] == list(range(len(found)))
    weights = found[0]["weights"]
    assert all(f["weights"] == weights for f in found)
    assert weights == pytest.approx(reference(framework), rel=1e-12)
    if local is not None:  # LOCAL_RANK and LOCAL_WORLD_SIZE as srun placed the ranks
        assert [f["local"] for f in found] == local


def test_one_torchrun_per_node_under_srun(slurm: Slurm, tmp_path: Path) -> None:
    """``srun torchrun --nproc-per-node`` with nothing else: each node's torchrun gets its
    node rank, node count and rendezvous from the step; four ranks on two nodes."""
    extra = {"DISTRIBUTED": "slurm", "DIST_REPLICAS_PER_WORKER": "2", "CPU_THREADS": "1",
             "TFBOOT_LOG": "info"}  # fmt: skip
    options = ["-N2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    torchrun = ["-m", "torch.distributed.run", str(TRAIN)]
    done = srun(slurm, tmp_path, options, extra, *torchrun, "torch", "multi")
    errors = succeeded(done, tmp_path, 2)
    found = [
        json.loads(line)
        for r in range(2)
        for line in (tmp_path / f"task-{r}.out").read_text().splitlines()
        if line.startswith("{")
    ]
    assert sorted(f["rank"] for f in found) == [0, 1, 2, 3] and {f["world"] for f in found} == {4}
    weights = reference("torch")
    assert all(f["weights"] == pytest.approx(weights, rel=1e-12) for f in found)
    assert "PET_NNODES=2 PET_NODE_RANK=1 PET_MASTER_ADDR=node9" in errors[1]


def test_jax_s_own_slurm_detection_agrees_with_tfboot(slurm: Slurm, tmp_path: Path) -> None:
    script = tmp_path / "agree.py"
    script.write_text(AGREE)
    options = ["-N2", "-n4", "--distribution=cyclic"]
    done = srun(slurm, tmp_path / "out", options, {"DISTRIBUTED": "slurm"}, script)
    succeeded(done, tmp_path / "out", 4)
    for rank, found in enumerate(results(tmp_path / "out", 4)):
        theirs, ours = found["theirs"], found["ours"]
        assert (
            (theirs["count"], theirs["id"], theirs["local"])
            == (
                ours["size"],
                ours["rank"],
                ours["local_rank"],
            )
            == (4, rank, rank // 2)
        )
        # The same coordinator host; the port is the contract's (DIST_PORT, else drawn from
        # the job and the step: a block's base), where JAX alone derives one from the job id.
        assert theirs["coordinator"].rpartition(":")[0] == ours["coordinator"].rpartition(":")[0]
        host, _, port = ours["coordinator"].rpartition(":")
        assert host == "node9" and (int(port) - PORTS[0]) % PORT_BLOCK == 0
        assert "cluster_detection_method" not in ours["arguments"]  # JAX's local devices


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_a_lost_task_ends_the_step_within_the_grace(
    slurm: Slurm, tmp_path: Path, framework: str
) -> None:
    extra = {"DISTRIBUTED": "slurm", "STEPS": "100000", "STEP_S": "0.05", "LOSE_RANK": "2",
             "LOSE_STEP": "5"}  # fmt: skip
    done = srun(slurm, tmp_path, ["-N2", "-n3", "--kill-on-bad-exit=1"], extra, TRAIN,
                framework, "multi")  # fmt: skip
    # 100000 steps of 0.05 s: a step that ends (within srun's 300 s) ended by the loss, the
    # others before their last step, none by the test's timeout; no clock is compared.
    assert done.returncode != 0, done.stderr[-2000:]
    assert " lost at " in (tmp_path / "task-2.out").read_text()
    for rank in (0, 1):
        assert '"weights"' not in (tmp_path / f"task-{rank}.out").read_text()

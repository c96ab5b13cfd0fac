"""tfboot under a real Slurm: sbatch and srun across nodes node9, node10 and node11.

Every job is configured only by the variables. The weights of a small model trained with a
custom loop under MultiWorkerMirroredStrategy must be identical across tasks and equal to
one process trained on the same global batches (``tests/cluster/mw_train.py``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from support import REPO, scenario_env
from tfboot.cluster.engines import PORT_BLOCK, PORTS
from tfboot.cluster.engines.slurm import slurm_port

if TYPE_CHECKING:  # the fixture's type; conftest is not a module to import at run time
    from conftest import Slurm

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TRAIN = REPO / "tests" / "cluster" / "mw_train.py"
KILLED = Path(__file__).with_name("train_until_killed.py")
PYTHON = sys.executable
BATCH = """#!/bin/bash
#SBATCH --job-name=train
#SBATCH --nodes=2
#SBATCH --ntasks=3

export DISTRIBUTED=slurm
export DIST_REPLICAS_PER_WORKER=1    # GPUs per task x VIRTUAL_SPLIT
export DIST_STARTUP_TIMEOUT=120      # exit, naming the missing peers
export CPU_THREADS=auto              # thread pools from the task's CPUs
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY

# TensorFlow in the batch step itself (outside srun): no task of the step, single node.
{python} -c 'import tensorflow as tf; print("batch step", tf.__version__)'
srun --distribution=block --kill-on-bad-exit=1 \\
    --output={out}/task-%t.out --error={out}/task-%t.err {python} {train} multi
"""


@pytest.fixture(scope="module")
def reference() -> list[float]:
    single = subprocess.run(
        [PYTHON, str(TRAIN), "single"],
        env=scenario_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr
    return json.loads(single.stdout.strip().splitlines()[-1])["weights"]


def task_results(folder: Path, count: int) -> list[tuple[dict, str]]:
    found = []
    for rank in range(count):
        out = (folder / f"task-{rank}.out").read_text()
        err = (folder / f"task-{rank}.err").read_text()
        found.append((json.loads(out.strip().splitlines()[-1]), err))
    return found


def assert_trained_alike(results: list[tuple[dict, str]], reference: list[float]) -> None:
    weights = [r["weights"] for r, _ in results]
    assert all(w == weights[0] for w in weights), weights
    np.testing.assert_allclose(weights[0], reference, rtol=1e-5, atol=1e-6)
    assert {r["replicas"] for r, _ in results} == {len(results)}


def srun(
    slurm: Slurm, folder: Path, options: list[str], extra: dict[str, str], script: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    folder.mkdir(parents=True, exist_ok=True)
    command = ["srun", *options, f"--output={folder}/task-%t.out", f"--error={folder}/task-%t.err"]
    return slurm.run([*command, PYTHON, str(script), *args], extra)


def test_the_documented_sbatch_script_3_tasks_on_2_nodes(
    slurm: Slurm, tmp_path: Path, reference: list[float]
) -> None:
    script = tmp_path / "train.sbatch"
    script.write_text(BATCH.format(python=PYTHON, out=tmp_path, train=TRAIN))
    done = slurm.run(["sbatch", "--wait", f"--output={tmp_path}/batch.out", str(script)])
    batch = (tmp_path / "batch.out").read_text()
    assert done.returncode == 0, batch
    assert "batch step 2." in batch
    job = re.search(r"Submitted batch job (\d+)", done.stdout).group(1)
    assert (
        f"cluster: single node (the batch script or allocation of Slurm job {job}, outside "
        "srun); nothing set" in batch
    )
    results = task_results(tmp_path, 3)
    assert_trained_alike(results, reference)
    config = json.loads(results[0][0]["tf_config"])
    base = slurm_port(results[0][0]["slurm"])[0]  # drawn from the job and the step
    assert config["cluster"] == {"worker": [f"node9:{base}", f"node9:{base + 1}", f"node10:{base}"]}
    assert "cluster: worker 2 of 3 (slurm; TF_CONFIG built" in results[2][1]


def test_a_chief_and_two_workers(slurm: Slurm, tmp_path: Path, reference: list[float]) -> None:
    extra = {
        "DISTRIBUTED": "slurm",
        "DIST_TASKS": "chief=1,worker=2",
        "DIST_STARTUP_TIMEOUT": "120",
    }
    done = srun(slurm, tmp_path, ["-N2", "-n3", "--kill-on-bad-exit=1"], extra, TRAIN, "multi")
    assert done.returncode == 0, done.stderr
    results = task_results(tmp_path, 3)
    assert_trained_alike(results, reference)
    config = json.loads(results[0][0]["tf_config"])
    base = slurm_port(results[0][0]["slurm"])[0]
    assert config == {
        "cluster": {"chief": [f"node9:{base}"], "worker": [f"node9:{base + 1}", f"node10:{base}"]},
        "task": {"type": "chief", "index": 0},
    }


def test_two_tasks_per_node_share_no_port_and_two_nodes_share_one(
    slurm: Slurm, tmp_path: Path, reference: list[float]
) -> None:
    extra = {"DISTRIBUTED": "slurm", "DIST_STARTUP_TIMEOUT": "120"}
    options = ["-N2", "--ntasks-per-node=2", "--kill-on-bad-exit=1"]
    done = srun(slurm, tmp_path, options, extra, TRAIN, "multi")
    assert done.returncode == 0, done.stderr
    results = task_results(tmp_path, 4)
    assert_trained_alike(results, reference)
    workers = json.loads(results[0][0]["tf_config"])["cluster"]["worker"]
    base = slurm_port(results[0][0]["slurm"])[0]
    assert workers == [f"node9:{base}", f"node9:{base + 1}", f"node10:{base}", f"node10:{base + 1}"]


def test_a_cyclic_distribution_is_built_as_srun_placed_it(
    slurm: Slurm, tmp_path: Path, reference: list[float]
) -> None:
    extra = {"DISTRIBUTED": "slurm", "DIST_STARTUP_TIMEOUT": "120"}
    options = ["-N2", "-n3", "--distribution=cyclic", "--kill-on-bad-exit=1"]
    done = srun(slurm, tmp_path, options, extra, TRAIN, "multi")
    assert done.returncode == 0, done.stderr
    results = task_results(tmp_path, 3)
    assert_trained_alike(results, reference)
    workers = json.loads(results[1][0]["tf_config"])["cluster"]["worker"]
    base = slurm_port(results[1][0]["slurm"])[0]
    assert workers == [f"node9:{base}", f"node10:{base}", f"node9:{base + 1}"]
    assert "ranks placed by cyclic distribution (SLURM_DISTRIBUTION)" in results[1][1]


def test_an_arbitrary_distribution_is_refused_by_every_rank(slurm: Slurm, tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("node10\nnode9\nnode10\n")
    extra = {"DISTRIBUTED": "slurm", "SLURM_HOSTFILE": str(hosts)}
    options = ["-n3", "--distribution=arbitrary"]
    done = srun(slurm, tmp_path / "out", options, extra, TRAIN, "multi")
    assert done.returncode != 0
    last = {
        (tmp_path / "out" / f"task-{rank}.err").read_text().strip().splitlines()[-1]
        for rank in range(3)
    }
    assert last == {
        "tfboot.ConfigError: SLURM_DISTRIBUTION='arbitrary' is invalid: expected block (the "
        "default), cyclic or plane: arbitrary places ranks from a host file tfboot does not "
        "see; run srun with --distribution=block (the default), cyclic or plane=N"
    }


GRACE_S = 3


def run_until_lost(slurm: Slurm, folder: Path, how: str, step: int) -> tuple[list[str], str]:
    """One step whose rank 2 is lost: the others' logs, and srun's."""
    extra = {
        "DISTRIBUTED": "slurm",
        "DIST_TERM_GRACE": str(GRACE_S),
        "KILL_RANK": "2",
        "KILL_HOW": how,
        "KILL_STEP": str(step),
    }
    done = srun(slurm, folder, ["-N2", "-n3", "--kill-on-bad-exit=1"], extra, KILLED)
    assert " lost at " in (folder / "task-2.out").read_text()  # rank 2 was lost as told
    return [(folder / f"task-{r}.err").read_text() for r in range(2)], done.stderr


@pytest.mark.parametrize(
    ("how", "step"),
    [("exit", -1), ("kill", 3)],
    ids=["exits-before-the-group-forms", "killed-mid-training"],
)
def test_a_lost_task_ends_the_step_in_seconds_and_is_named(
    slurm: Slurm, tmp_path: Path, how: str, step: int
) -> None:
    """srun --kill-on-bad-exit sends SIGTERM, which TensorFlow ignores while it waits on its
    peers; on its own the step would end at Slurm's KillWait (30 s): bench/slurm_term.py."""
    errs, srun_err = run_until_lost(slurm, tmp_path, how, step)
    for err in errs:  # ended by tfboot's watcher at srun's SIGTERM, which names the loss
        named = re.search(r"cluster: SIGTERM: this task is being ended; peers no longer "
                          r"answering: worker 2 at node10:(\d+) \(refused\)", err)  # fmt: skip
        assert named is not None, (err, srun_err)
        assert (int(named.group(1)) - PORTS[0]) % PORT_BLOCK == 0  # local rank 0: a base


def test_the_tasks_of_a_step_give_one_used_line_and_every_task_s_record(
    slurm: Slurm, tmp_path: Path
) -> None:
    """One job, one report: task 0 of the step speaks at info level; every task writes its
    own record (the others named by pid), and ``tfboot suggest`` merges them as one run."""
    script = tmp_path / "task.py"
    script.write_text("import os, torch\nprint('task', os.environ['SLURM_PROCID'])\n")
    usage = tmp_path / "usage.json"
    extra = {"CPU_THREADS": "1", "TFBOOT_USAGE_FILE": str(usage)}
    done = srun(slurm, tmp_path / "out", ["-N2", "-n3"], extra, script)
    assert done.returncode == 0, done.stderr
    lines = [
        [line for line in (tmp_path / "out" / f"task-{t}.err").read_text().splitlines()
         if line.startswith("tfboot: used:")]
        for t in range(3)
    ]  # fmt: skip
    assert [len(found) for found in lines] == [1, 0, 0]
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("usage*.json"))]
    assert len(records) == 3 and len({r["pid"] for r in records}) == 3
    assert len({r["run"]["id"] for r in records}) == 1
    assert [r["run"]["lead"] for r in records].count(True) == 1
    merged = subprocess.run(
        [PYTHON, "-m", "tfboot", "suggest", "--json", *map(str, tmp_path.glob("usage*.json"))],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert merged.returncode == 0, merged.stderr
    assert "1 run" in json.loads(merged.stdout)["suggest"]["sources"]["memory"]

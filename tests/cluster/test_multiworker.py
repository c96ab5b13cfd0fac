"""Real MultiWorkerMirroredStrategy clusters as local processes, configured only by tfboot.

Each task is a fresh interpreter; tfboot builds its TF_CONFIG at ``import tensorflow``
from the DIST_* variables. The Slurm case fakes the SLURM_* variables srun would set
(a stand-in for srun: no Slurm runs here). Every process is SIGKILLed on cleanup, as
TensorFlow swallows SIGTERM under MultiWorkerMirroredStrategy.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import free_ports, last_json, run_python, started

pytestmark = [pytest.mark.tf, pytest.mark.multiworker, pytest.mark.xdist_group("multiworker")]

TRAIN = Path(__file__).with_name("mw_train.py")
LIMIT_S = 150


@pytest.fixture
def start() -> Iterator:
    with started(TRAIN, LIMIT_S) as launch:
        yield launch


def outputs(processes: list[subprocess.Popen[str]]) -> list[tuple[dict, str]]:
    """Every task's output; when one failed, every failed task's stderr (the cause is often
    the other task's: a worker that waits for a peer that never started)."""
    ended = [(process, *process.communicate(timeout=LIMIT_S + 10)) for process in processes]
    failed = [
        f"task {i} ended with {process.returncode}:\n{err[-3000:]}"
        for i, (process, _, err) in enumerate(ended)
        if process.returncode != 0
    ]
    assert not failed, "\n".join(failed)
    return [(last_json(out), err) for _, out, err in ended]


def assert_trained_alike(workers: list[dict], reference: dict) -> None:
    first = workers[0]["weights"]
    for worker in workers:
        assert worker["weights"] == first  # identical across workers
        assert worker["replicas"] == len(workers)
    assert first == pytest.approx(reference["weights"], rel=1e-5, abs=1e-6)
    assert first != pytest.approx([0.0] * len(first))  # the steps did train


def test_two_workers_from_k8s_variables_match_one_process(start) -> None:
    ports = free_ports(2)
    hosts = "worker=" + ",".join(f"localhost:{p}" for p in ports)
    common = {"DISTRIBUTED": "k8s", "DIST_TASKS": "2", "DIST_HOSTS": hosts}
    common["DIST_REPLICAS_PER_WORKER"] = "1"
    workers = [start({**common, "JOB_COMPLETION_INDEX": str(i)}, "multi") for i in range(2)]
    reference = start({}, "single")
    results = outputs([*workers, reference])
    assert_trained_alike([r for r, _ in results[:2]], results[2][0])
    for index, (result, err) in enumerate(results[:2]):
        assert result["tf_config"] == (
            f'{{"cluster":{{"worker":["localhost:{ports[0]}","localhost:{ports[1]}"]}},'
            f'"task":{{"type":"worker","index":{index}}}}}'
        )
        line = next(x for x in err.splitlines() if x.startswith("tfboot: cluster: worker"))
        assert f"worker {index} of 2 (k8s; TF_CONFIG built" in line
        assert f"index from JOB_COMPLETION_INDEX={index}" in line
        assert f"peers localhost:{ports[1 - index]}" in line
        assert "replicas per worker 1 (DIST_REPLICAS_PER_WORKER=1 (env))" in line
    assert results[2][0]["tf_config"] is None


def test_chief_and_two_workers_from_slurm_variables(start) -> None:
    base = free_ports(3)[0]
    common = {
        "DISTRIBUTED": "auto",
        "DIST_TASKS": "chief=1,worker=2",
        "DIST_PORT": str(base),
        # Stand-in for srun: the variables it sets for a 3-task step on one node.
        "SLURM_STEP_NODELIST": "localhost",
        "SLURM_STEP_TASKS_PER_NODE": "3",
        "SLURM_STEP_NUM_TASKS": "3",
        "SLURMD_NODENAME": "localhost",
    }
    ranks = [
        start({**common, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r)}, "multi")
        for r in range(3)
    ]
    reference = start({}, "single")
    results = outputs([*ranks, reference])
    assert_trained_alike([r for r, _ in results[:3]], results[3][0])
    assert [r["rank"] for r, _ in results[:3]] == [0, 1, 2]
    chief_err = results[0][1]
    assert "cluster: chief 0 of 3 (slurm; TF_CONFIG built; type from SLURM_PROCID=0" in chief_err
    assert f"peers localhost:{base + 1}, localhost:{base + 2}" in chief_err


def task_0(*hosts: str, **more: str) -> dict[str, str]:
    """Worker 0 of an Indexed Job whose workers are ``hosts``, with ``more`` variables."""
    hosts_variable = "worker=" + ",".join(hosts)
    return {"DISTRIBUTED": "k8s", "DIST_TASKS": str(len(hosts)), "DIST_HOSTS": hosts_variable,
            "JOB_COMPLETION_INDEX": "0", **more}  # fmt: skip


HANG = """
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
print("not reached")
"""


OWN_WATCHDOG = """
import faulthandler
import tensorflow as tf
faulthandler.dump_traceback_later(1)  # the program's own hang watchdog
strategy = tf.distribute.MultiWorkerMirroredStrategy()
strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
print("not reached")
"""


def test_the_program_s_own_faulthandler_watchdog_stays_armed() -> None:
    """tfboot ends a task stuck on its peers without faulthandler: the watchdog the program
    arms (faulthandler has one) dumps its traceback at 1 s, and the task still ends at
    DIST_STARTUP_TIMEOUT. (Armed after the import here: a dump while TensorFlow's import
    started its threads crashed the process in one run of four.)"""
    own, absent = free_ports(2)
    env = task_0(f"localhost:{own}", f"localhost:{absent}", DIST_STARTUP_TIMEOUT="6")
    result = run_python(OWN_WATCHDOG, env, timeout=LIMIT_S)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Timeout (0:00:01)!" in result.stderr, result.stderr[-3000:]
    assert "DIST_STARTUP_TIMEOUT=6 reached, ending this worker (exit status 1)" in result.stderr


LATE_WAIT = """
import time
import tensorflow as tf
time.sleep(9)  # loading data: longer than DIST_STARTUP_TIMEOUT and its margin
print("the strategy starts", flush=True)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
print("not reached")
"""


def test_missing_peers_are_named_then_the_startup_timeout_ends_the_worker(tmp_path) -> None:
    """The clock starts where the strategy waits, not at the import: 9 s of work before it
    are not counted against a 3 s timeout (plus its 5 s margin). The end is named on stderr
    and in the usage record, which ``tfboot suggest`` reads as the deadline's end."""
    usage = tmp_path / "usage.json"
    own, absent = free_ports(2)
    env = task_0(f"localhost:{own}", f"localhost:{absent}", "tfboot-absent-peer.invalid",
                 DIST_STARTUP_TIMEOUT="3", TFBOOT_USAGE_FILE=str(usage))  # fmt: skip
    result = run_python(LATE_WAIT, env, timeout=LIMIT_S)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "the strategy starts" in result.stdout and "not reached" not in result.stdout
    lines = [x for x in result.stderr.splitlines() if x.startswith("tfboot:")]
    waiting = next(x for x in lines if "still waiting for 2 peer(s)" in x)
    assert f"localhost:{absent} (refused)" in waiting
    assert "tfboot-absent-peer.invalid:2222 (DNS:" in waiting
    assert lines[-1].startswith("tfboot: error: cluster: after 3 s still waiting")
    assert f"localhost:{absent} (refused)" in lines[-1]
    assert "DIST_STARTUP_TIMEOUT=3 reached, ending this worker (exit status 1)" in lines[-1]
    record = json.loads(usage.read_text())
    assert record["final"] is False and record["reason"] == "waiting for peers", record
    assert record["waiting"] == {"limit": "DIST_STARTUP_TIMEOUT", "seconds": 3}, record
    suggested = subprocess.run([sys.executable, "-m", "tfboot", "suggest", str(usage)],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
    assert suggested.returncode == 0, suggested.stderr
    assert "killed" not in suggested.stdout and "grows from" not in suggested.stdout
    assert "waiting for its peers, which DIST_STARTUP_TIMEOUT=3 s bounds" in suggested.stdout


SLOW_START = """
import json, os, pathlib, sys, time
import tensorflow as tf
ready = pathlib.Path(sys.argv[1])
(ready / os.environ["JOB_COMPLETION_INDEX"]).touch()
while len(list(ready.iterdir())) < 2:  # both imported: their waits start together
    time.sleep(0.05)
time.sleep(float(sys.argv[2]))  # loading data, past the timeout and its margin
strategy = tf.distribute.MultiWorkerMirroredStrategy()
total = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
print(json.dumps({"total": float(total)}), flush=True)
"""


def test_work_before_the_group_is_never_counted(tmp_path) -> None:
    """Two workers load data for 9 s, past DIST_STARTUP_TIMEOUT=3 and its margin, then form
    their group with every peer present: both train."""
    script, ready = tmp_path / "slow_start.py", tmp_path / "ready"
    script.write_text(SLOW_START)
    ready.mkdir()
    ports = free_ports(2)
    hosts = [f"localhost:{p}" for p in ports]
    with started(script, LIMIT_S) as start:
        tasks = [start({**task_0(*hosts, DIST_STARTUP_TIMEOUT="3"), "JOB_COMPLETION_INDEX": str(i)},
                       str(ready), "9") for i in range(2)]  # fmt: skip
        for result, _ in outputs(tasks):
            assert result == {"total": 2.0}


SPAWN = """
import json, multiprocessing, os
import tensorflow
from tfboot.executor import last_result

def child(queue):
    import tensorflow
    result = last_result()
    queue.put({"error": result.error, "calls": result.calls, "line": result.cluster.line(),
               "marker": os.environ.get("TFBOOT_TASK"), "tf_config": os.environ.get("TF_CONFIG")})

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    process.join(120)
    seen = queue.get(timeout=5) if process.exitcode == 0 else None
    calls = last_result().calls
    print(json.dumps({"child": seen, "exit": process.exitcode, "pid": os.getpid(), "calls": calls,
                      "tf_config": os.environ.get("TF_CONFIG")}))
"""


def test_a_spawned_child_is_no_task_keeps_tf_config_and_starts_no_watcher(tmp_path) -> None:
    own, absent = free_ports(2)
    env = task_0(f"localhost:{own}", f"localhost:{absent}", TFBOOT_ON_ERROR="raise")
    script = tmp_path / "spawn_child.py"
    script.write_text(SPAWN)
    result = run_python(script, env, timeout=LIMIT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    out = last_json(result.stdout)
    assert out["exit"] == 0 and out["child"]["error"] is None, result.stderr[-3000:]
    assert "peer watcher started for 1 peer(s); its clock from the start of each wait in " \
        "CollectiveAllReduceExtended._initialize_multi_worker, remote.connect_to_cluster" \
        in out["calls"]  # fmt: skip
    assert out["child"]["marker"] == str(out["pid"])  # the task's pid, inherited
    assert not any("peer watcher" in call for call in out["child"]["calls"]), out
    assert out["child"]["line"].startswith("cluster: none here: a child (pid ")
    assert out["child"]["line"].endswith(f"of the task's process (pid {out['pid']}), which "
                                         "holds its place; nothing set or checked")  # fmt: skip
    assert out["child"]["tf_config"] == out["tf_config"] is not None  # inherited, untouched
    assert not any(call.startswith("os.environ['TF_CONFIG']") for call in out["child"]["calls"])


def test_replicas_mismatch_fails_the_import() -> None:
    env = {
        "DISTRIBUTED": "k8s",
        "DIST_TASKS": "2",
        "DIST_HOSTS": "worker=w-{i}.train",
        "JOB_COMPLETION_INDEX": "1",
        "DIST_REPLICAS_PER_WORKER": "2",
        "VIRTUAL_SPLIT": "2",
    }
    result = run_python("import tensorflow", env, timeout=LIMIT_S)
    assert result.returncode == 1
    assert "tfboot.ConfigError: DIST_REPLICAS_PER_WORKER='2' cannot be met on this host" in (
        result.stderr
    )
    assert "this worker has 1 local replica(s)" in result.stderr


def test_off_leaves_tf_config_alone_and_loads_no_cluster_code() -> None:
    code = (
        "import os, sys, tensorflow\n"
        "print(os.environ['TF_CONFIG'])\n"
        "print(sorted(m for m in sys.modules if m.startswith('tfboot.cluster.')))\n"
    )
    result = run_python(code, {"TF_CONFIG": "not json", "DIST_TASKS": "bad"}, timeout=LIMIT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-2:] == ["not json", "[]"]
    assert "cluster" not in result.stderr


def test_doctor_reports_the_cluster_and_tf_config() -> None:
    env = {
        "DISTRIBUTED": "k8s",
        "DIST_TASKS": "chief=1,worker=1",
        "DIST_HOSTS": "chief=localhost:1;worker=tfboot-absent-peer.invalid:2",
        "DIST_TASK_TYPE": "chief",
        "DIST_TASK_INDEX": "0",
        "DIST_REPLICAS_PER_WORKER": "1",
    }
    result = run_python("from tfboot.cli import main; main(['doctor', '--json'])", env)
    cluster = last_json(result.stdout)["cluster"]
    assert cluster["tf_config"] == (
        '{"cluster":{"chief":["localhost:1"],"worker":["tfboot-absent-peer.invalid:2"]},'
        '"task":{"type":"chief","index":0}}'
    )
    assert cluster["replicas_per_worker"] == 1 and cluster["engine"] == "k8s"
    assert cluster["peers"] == ["tfboot-absent-peer.invalid:2"]

"""One cluster contract for PyTorch, JAX and Keras 3: the plans, and real groups of processes.

The plan tests read what ``DISTRIBUTED`` and ``DIST_*`` give each framework: PyTorch's
``env://`` variables, ``jax.distributed.initialize``'s arguments, Keras 3's variables, and
what is refused. The process tests start each task as a fresh interpreter on this machine
(addresses on 127.0.0.1, one port per task), configured only by those variables: the
unchanged script ``dp_train.py`` forms a gloo group, a JAX cluster or a Keras 3 one with no
arguments, and every rank ends with the weights of one process trained alone. The Slurm
variables here are what srun sets (recorded from the real Slurm of ``tests/slurm``, where
the same scripts also run under srun).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import NEWER_PYTHON, free_ports, matrix_python, scenario_env, stamp, started
from tfboot.cluster.launch import HEARTBEAT_FROM, torchrun_options
from tfboot.cluster.plan import plan_cluster
from tfboot.errors import ConfigError
from tfboot.settings import resolve

pytestmark = [pytest.mark.multiworker, pytest.mark.xdist_group("multiworker")]

TRAIN = Path(__file__).with_name("dp_train.py")
CHILDREN = Path(__file__).with_name("children.py")
LIMIT_S = 150
KILLED = 128 + signal.SIGKILL  # timeout -s KILL's status for a task still running at LIMIT_S
GRACE_S = 5  # DIST_TERM_GRACE's default: JAX's heartbeat timeout under tfboot
K8S = {"DIST_TASKS": "3", "DIST_HOSTS": "worker=w-{i}.train", "JOB_COMPLETION_INDEX": "2"}
# What srun sets for rank 3 of -N2 -n4 --distribution=cyclic on node9 and node10.
SLURM = {
    "SLURM_JOB_ID": "7",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "4",
    "SLURM_STEP_NODELIST": "node[9-10]",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURM_DISTRIBUTION": "cyclic",
    "SLURMD_NODENAME": "node10",
}


def launch(framework: str, mode: str, env: dict[str, str], jax: tuple[int, ...] | None = None,
           agent: tuple[str, ...] | None = None):  # fmt: skip
    settings = resolve({**env, "DISTRIBUTED": mode}, ("DISTRIBUTED",))
    assert settings.cluster is not None
    from tfboot.frameworks import ADAPTERS

    adapter = next(a for a in ADAPTERS.values() if framework == a.NAME)
    facts = {"agent": agent, "visible": None, "version": jax}
    return plan_cluster(adapter.LAUNCH, framework, mode, settings.cluster, env, facts)


def error(framework: str, mode: str, env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        launch(framework, mode, env)
    return str(info.value)


def error_agent(env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        launch("PyTorch", "k8s", env, agent=())
    return str(info.value)


class TestPlans:
    def test_pytorch_gets_what_init_process_group_reads(self) -> None:
        cluster = launch("PyTorch", "k8s", K8S)
        assert cluster.environ == {
            "MASTER_ADDR": "w-0.train",
            "MASTER_PORT": "2222",
            "WORLD_SIZE": "3",
            "RANK": "2",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
        }
        assert cluster.environ.get("TF_CONFIG") is None
        assert cluster.line().startswith(
            "cluster: PyTorch rank 2 of 3 (k8s; worker 2, index from JOB_COMPLETION_INDEX=2); "
            "rank 0 at w-0.train:2222 (port: default 2222 (k8s)); set MASTER_ADDR=w-0.train"
        )

    def test_the_chief_is_rank_0_and_dist_port_is_the_masters(self) -> None:
        env = {
            "DIST_TASKS": "chief=1,worker=2",
            "DIST_HOSTS": "chief=c-0.train;worker=w-{i}.train",
            "DIST_TASK_TYPE": "worker",
            "DIST_TASK_INDEX": "0",
            "DIST_PORT": "29500",
        }
        found = launch("PyTorch", "k8s", env).environ
        assert (found["MASTER_ADDR"], found["MASTER_PORT"], found["RANK"]) == (
            "c-0.train",
            "29500",
            "1",
        )

    def test_slurm_ranks_and_local_ranks_follow_the_step(self) -> None:
        found = launch("PyTorch", "slurm", SLURM).environ
        # cyclic: ranks 0 and 2 on node9, 1 and 3 on node10; rank 0 at node9, port drawn
        # from job 7 step 0: block 7 x 16 of 16 ports from 10000
        assert found == {
            "MASTER_ADDR": "node9",
            "MASTER_PORT": "11792",
            "WORLD_SIZE": "4",
            "RANK": "3",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "2",
        }

    def test_jax_gets_initialize_s_arguments_and_keras_its_variables(self) -> None:
        cluster = launch("JAX", "k8s", {**K8S, "DIST_STARTUP_TIMEOUT": "600"})
        assert cluster.launch is not None
        assert cluster.launch.arguments == {
            "coordinator_address": "w-0.train:2222",
            "num_processes": 3,
            "process_id": 2,
            "initialization_timeout": 600,
            "heartbeat_timeout_seconds": GRACE_S,
            "cluster_detection_method": "deactivate",
        }
        assert cluster.environ == {
            "KERAS_DISTRIBUTION_JOB_ADDRESSES": "w-0.train:2222",
            "KERAS_DISTRIBUTION_NUM_PROCESSES": "3",
            "KERAS_DISTRIBUTION_PROCESS_ID": "2",
        }

    def test_on_slurm_jax_keeps_its_own_detection_for_the_local_devices(self) -> None:
        cluster = launch("JAX", "slurm", SLURM)
        assert cluster.launch is not None
        assert "cluster_detection_method" not in cluster.launch.arguments
        assert cluster.launch.arguments["process_id"] == 3

    def test_an_older_jax_gets_no_argument_it_lacks(self) -> None:
        cluster = launch("JAX", "k8s", K8S, jax=(0, 4, 30))
        assert cluster.launch is not None
        assert set(cluster.launch.arguments) == {
            "coordinator_address",
            "num_processes",
            "process_id",
        }
        with pytest.raises(ConfigError) as info:
            launch("JAX", "k8s", {**K8S, "DIST_TERM_GRACE": "3"}, jax=(0, 6, 2))
        assert "JAX 0.6.2's jax.distributed.initialize takes no heartbeat_timeout_seconds" in str(
            info.value
        )
        assert HEARTBEAT_FROM == (0, 7, 0)

    @pytest.mark.parametrize("framework", ["PyTorch", "JAX"])
    def test_parameter_servers_are_tensorflow_s(self, framework: str) -> None:
        env = {**K8S, "DIST_TASKS": "worker=3,ps=1", "DIST_HOSTS": "worker=w-{i}.t;ps=p-{i}.t"}
        assert error(framework, "k8s", env) == (
            f"DIST_TASKS='worker=3,ps=1' cannot be met: {framework} numbers its processes 0 to "
            "N-1 and has no ps tasks: parameter servers and evaluators are TensorFlow's; give "
            "DIST_TASKS only chief and worker tasks (such as worker=4)"
        )

    def test_a_launcher_s_value_that_agrees_is_kept_and_not_set(self) -> None:
        cluster = launch("PyTorch", "k8s", {**K8S, "MASTER_PORT": "2222", "RANK": "2"})
        assert cluster.launch is not None and cluster.launch.checked == ["MASTER_PORT", "RANK"]
        assert "RANK" not in cluster.environ and "MASTER_PORT" not in cluster.environ

    def test_a_contradiction_names_both_sides(self) -> None:
        text = error("PyTorch", "k8s", {**K8S, "RANK": "1", "WORLD_SIZE": "4"})
        one = (
            "{}='{}' contradicts the cluster: the cluster tfboot forms from DISTRIBUTED and "
            "DIST_* gives '{}' for this task, rank 2 of 3 (k8s; worker 2, index from "
            "JOB_COMPLETION_INDEX=2); fix the DIST_* variables, or unset DISTRIBUTED to leave "
            "the job to the launcher that set it"
        )
        assert text == (
            "2 problems in the tfboot configuration:\n  - "
            + one.format("WORLD_SIZE", "4", "3")
            + "\n  - "
            + one.format("RANK", "1", "2")
        )
        jax = error("JAX", "k8s", {**K8S, "JAX_COORDINATOR_ADDRESS": "other:1234"})
        assert jax.startswith("JAX_COORDINATOR_ADDRESS='other:1234' contradicts the cluster")
        assert "gives 'w-0.train:2222'" in jax

    def test_under_torchrun_the_counts_are_checked_and_nothing_set(self) -> None:
        torchrun = {"TORCHELASTIC_RUN_ID": "j", "GROUP_WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "4"}
        env = {**K8S, **torchrun, "RANK": "9", "DIST_REPLICAS_PER_WORKER": "4"}
        cluster = launch("PyTorch", "k8s", env)
        assert cluster.environ == {}
        assert cluster.line().startswith("cluster: PyTorch under torchrun, k8s task 2 of 3")
        text = error("PyTorch", "k8s", {**env, "GROUP_WORLD_SIZE": "2"})
        assert text.startswith(
            "GROUP_WORLD_SIZE='2' contradicts the cluster: torchrun counts 2 node(s), the "
            "cluster tfboot forms from DISTRIBUTED and DIST_* has 3 task(s)"
        )

    @pytest.mark.parametrize(
        ("argv", "options"),
        [
            (["/venv/bin/python", "/venv/bin/torchrun", "--nproc-per-node=2", "t.py", "--lr", "1"],
             ("--nproc-per-node=2",)),
            (["python3", "-X", "utf8", "-m", "torch.distributed.run", "t.py"], ()),
            (["python3", "-m", "torch.distributed.launch", "--nnodes", "2", "--standalone", "t.py",
              "--standalone"], ("--nnodes", "2", "--standalone")),
            (["python3", "/usr/bin/torchrun", "-t", "3", "-m", "pkg.train", "--rdzv-conf", "x=1"],
             ("-t", "3", "-m")),
            (["python3", "train.py", "-m", "torch.distributed.run"], None),
            (["python3", "-c", "import torch"], None),
            (["python3"], None),
        ],
    )  # fmt: skip
    def test_torchrun_itself_is_known_by_its_command_line(
        self, argv: list[str], options: tuple[str, ...] | None
    ) -> None:
        """Its own options end at the script: the script's are not torchrun's."""
        assert torchrun_options(argv) == options

    def test_the_startup_timeout_bounds_torchrun_s_rendezvous(self) -> None:
        env = {**K8S, "DIST_STARTUP_TIMEOUT": "30"}
        cluster = launch("PyTorch", "k8s", env, agent=("--nproc-per-node=2",))
        assert cluster.environ["PET_RDZV_CONF"] == "timeout=30,join_timeout=30"
        assert "PET_RDZV_CONF=timeout=30,join_timeout=30" in cluster.line()
        for given, mine in ((("--rdzv-conf=read_timeout=9",), {}),
                            ((), {"PET_RDZV_CONF": "read_timeout=9"})):  # fmt: skip
            kept = launch("PyTorch", "k8s", {**env, **mine}, agent=given)
            assert "PET_RDZV_CONF" not in kept.environ
            assert kept.warnings == ["DIST_STARTUP_TIMEOUT=30 is not given to torchrun's "
                                     "rendezvous: --rdzv-conf is yours; add timeout and "
                                     "join_timeout to it"]  # fmt: skip

    @pytest.mark.parametrize(("options", "env"), [(("--standalone",), {}),
                                                  ((), {"PET_STANDALONE": "1"})])  # fmt: skip
    def test_a_standalone_torchrun_is_a_job_of_its_node(self, options, env) -> None:
        cluster = launch("PyTorch", "k8s", {**K8S, **env}, agent=options)
        assert cluster.launch is not None and cluster.launch.environ == {}
        assert set(cluster.environ) == set()  # no pid: no TFBOOT_TASK either
        assert cluster.line() == (
            "cluster: PyTorch under torchrun --standalone, a job of this node alone (k8s task "
            "2 of 3 not joined); nothing set"
        )
        assert "the 3 tasks of the cluster are not joined" in cluster.warnings[0]

    def test_torchrun_itself_gets_its_options_as_kubeflow_trainer_gives_them(self) -> None:
        env = {**K8S, "DIST_REPLICAS_PER_WORKER": "4", "PET_NNODES": "3"}
        cluster = launch("PyTorch", "k8s", env, agent=())
        assert cluster.environ == {
            "PET_NODE_RANK": "2",
            "PET_MASTER_ADDR": "w-0.train",
            "PET_MASTER_PORT": "2222",
            "PET_NPROC_PER_NODE": "4",
        }
        assert cluster.launch is not None and cluster.launch.checked == ["PET_NNODES"]
        text = error_agent({**env, "PET_NNODES": "2"})
        assert text.startswith("PET_NNODES='2' contradicts the cluster")

    def test_one_process_per_task_is_one_replica(self) -> None:
        text = error("PyTorch", "k8s", {**K8S, "DIST_REPLICAS_PER_WORKER": "2"})
        assert "torchrun --nproc-per-node=2" in text

    def test_no_engine_is_a_single_node_with_nothing_set(self) -> None:
        cluster = launch("PyTorch", "auto", {})
        assert cluster.environ == {} and cluster.launch is None
        assert cluster.line().endswith("; nothing set")


@pytest.fixture
def start() -> Iterator:
    with started(TRAIN, LIMIT_S, {"TFBOOT_LOG": "quiet"}) as run:
        yield run


def reference(framework: str) -> list[float]:
    done = subprocess.run(
        [sys.executable, str(TRAIN), framework, "single"],
        env=scenario_env(),
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["world"] == 1
    return found["weights"]


def tasks(count: int, chief: bool = False) -> list[dict[str, str]]:
    """Each task's variables: one port each on 127.0.0.1, as the Pods' addresses."""
    ports = free_ports(count)
    hosts = [f"127.0.0.1:{p}" for p in ports]
    if chief:
        common = {"DIST_TASKS": f"chief=1,worker={count - 1}",
                  "DIST_HOSTS": f"chief={hosts[0]};worker={','.join(hosts[1:])}"}  # fmt: skip
        roles = [("chief", 0)] + [("worker", i) for i in range(count - 1)]
    else:
        common = {"DIST_TASKS": str(count), "DIST_HOSTS": f"worker={','.join(hosts)}"}
        roles = [("worker", i) for i in range(count)]
    return [
        {"DISTRIBUTED": "k8s", **common, "DIST_TASK_TYPE": kind, "DIST_TASK_INDEX": str(i)}
        for kind, i in roles
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("framework", "chief"),
    [("torch", False), ("torch", True), ("jax", False), ("jax", True), ("keras", False)],
)
def test_an_unchanged_script_forms_the_group_and_trains_as_one_process(
    start, framework: str, chief: bool
) -> None:
    """With one Pod template's variables for every framework: a startup timeout and one
    replica per task, checked and kept."""
    bounds = {"DIST_STARTUP_TIMEOUT": "120", "DIST_REPLICAS_PER_WORKER": "1"}
    processes = [start({**env, **bounds}, framework, "multi") for env in tasks(3, chief)]
    ended = [(p, *p.communicate(timeout=LIMIT_S + 10)) for p in processes]
    failed = [f"task {i}: {err[-3000:]}" for i, (p, _, err) in enumerate(ended) if p.returncode]
    assert not failed, "\n".join(failed)
    found = [json.loads(out.splitlines()[-1]) for _, out, _ in ended]
    assert [f["rank"] for f in found] == [0, 1, 2] and {f["world"] for f in found} == {3}
    if framework == "torch":  # three tasks at one host: local ranks 0 to 2
        assert [f["local"] for f in found] == [[str(r), "3"] for r in range(3)]
    weights = found[0]["weights"]
    assert all(f["weights"] == weights for f in found)
    assert weights == pytest.approx(reference(framework), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["jax", "keras"])
def test_the_newest_jax_on_its_own_python_forms_the_group(start, framework: str) -> None:
    """The same unchanged script, two tasks, on the version matrix's newest JAX and the newer
    Python it needs: ``jax.distributed.initialize()`` (or Keras 3's) with no arguments, every
    rank ending with the weights of one process trained alone (in the test environment)."""
    python = matrix_python("jax", NEWER_PYTHON)
    processes = [start(env, framework, "multi", python=python) for env in tasks(2)]
    ended = [(p, *p.communicate(timeout=LIMIT_S + 10)) for p in processes]
    failed = [f"task {i}: {err[-3000:]}" for i, (p, _, err) in enumerate(ended) if p.returncode]
    assert not failed, "\n".join(failed)
    found = [json.loads(out.splitlines()[-1]) for _, out, _ in ended]
    assert [f["rank"] for f in found] == [0, 1] and {f["world"] for f in found} == {2}
    assert found[0]["weights"] == found[1]["weights"]
    assert found[0]["weights"] == pytest.approx(reference(framework), rel=1e-12)


@pytest.mark.parametrize("index", [0, 1])
def test_pytorch_s_group_must_form_within_the_startup_timeout(start, index: int,
                                                              tmp_path: Path) -> None:  # fmt: skip
    """One task of two started: it ends with exit status 1 once DIST_STARTUP_TIMEOUT ran out
    in init_process_group, naming what it waited for; its usage record is final and says
    so, and ``tfboot suggest`` reads no kill from it."""
    usage = tmp_path / "usage.json"
    env = {**tasks(2)[index], "DIST_STARTUP_TIMEOUT": "3", "TFBOOT_USAGE_FILE": str(usage)}
    process = start(env, "torch", "multi")
    out, err = process.communicate(timeout=LIMIT_S)
    # tfboot's end (its status, its line below), not gloo's 30 min timeout nor the test's kill
    assert process.returncode == 1, err
    rank0 = env["DIST_HOSTS"].split("=")[1].split(",")[0]
    waited = (
        f"rank 0 waited at {rank0} for the other 1 rank(s)"
        if index == 0
        else f"rank 1 of 2 waited for rank 0 at {rank0}"
    )
    assert err.splitlines()[-1] == (
        "tfboot: error: cluster: PyTorch's group did not form within DIST_STARTUP_TIMEOUT=3 s "
        f"of init_process_group's start: {waited}; ending this task"
    )
    record = json.loads(usage.read_text())
    assert record["final"] is True and record["reason"] == "DIST_STARTUP_TIMEOUT", record
    # the 3 s counted from init_process_group's start, whatever the import before it took:
    # the end's record (stamped in whole seconds) no earlier than 3 s after the call
    joined = float(next(line for line in out.splitlines() if line.startswith("joining at ")
                        ).split()[-1])  # fmt: skip
    assert stamp(record["at"]) >= int(joined + 3), (record["at"], joined)
    suggested = subprocess.run([sys.executable, "-m", "tfboot", "suggest", "--json", str(usage)],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
    assert suggested.returncode == 0, suggested.stderr
    assert "killed" not in suggested.stdout and "grows from" not in suggested.stdout


@pytest.mark.parametrize(
    ("case", "env"),
    [
        ("data loaded for longer than the timeout first", {"PREPARE_S": "12"}),
        ("a second group formed after the timeout", {"GROUPS": "2", "STEP_S": "12"}),
    ],
)
def test_a_deadline_bounds_the_wait_and_nothing_else(start, case: str, env: dict) -> None:
    """DIST_STARTUP_TIMEOUT=10 with every peer present: 12 s of work before the group, or a
    group formed 12 s after the first, are never cut short (each call of init_process_group
    gets its own 10 s, ample for two local ranks to meet on a loaded machine)."""
    processes = [
        start({**task, **env, "DIST_STARTUP_TIMEOUT": "10"}, "torch", "multi") for task in tasks(2)
    ]
    ended = [(p, *p.communicate(timeout=LIMIT_S)) for p in processes]
    failed = [f"task {i}: {err[-3000:]}" for i, (p, _, err) in enumerate(ended) if p.returncode]
    assert not failed, (case, failed)
    found = [json.loads(out.splitlines()[-1]) for _, out, _ in ended]
    assert [f["rank"] for f in found] == [0, 1]
    assert found[0]["weights"] == pytest.approx(reference("torch"), rel=1e-12)


@pytest.mark.parametrize(
    "model", ["mp.spawn", "fork", "spawn", "forkserver", "loader-fork", "loader-forkserver",
              "subprocess"],
)  # fmt: skip
def test_a_task_s_children_are_no_tasks(model: str) -> None:
    """Task 0 of two (its peer absent: nothing waits for it) starts two children: each
    imports torch, or already has it, and is neither refused nor made a task. Under
    mp.spawn, PyTorch's DDP tutorial, the children form their own group on the
    MASTER_ADDR/MASTER_PORT the parent set, and train as they do without tfboot."""
    env = {**tasks(2)[0], "DIST_STARTUP_TIMEOUT": "5", "TFBOOT_ON_ERROR": "raise"}
    done = subprocess.run(
        [sys.executable, str(CHILDREN), model, str(free_ports(1)[0])],
        env=scenario_env(env), capture_output=True, text=True, timeout=LIMIT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    parent = found["parent"]
    assert parent["line"].startswith("cluster: PyTorch rank 0 of 2 ") and parent["rank"] == "0"
    assert parent["task"] == str(parent["pid"])
    children = found["children"]
    assert len(children) == 2
    for seen in children:
        assert seen["error"] is None and seen["task"] == str(parent["pid"]), seen
        assert seen["pid"] != parent["pid"]
        if model in ("fork", "loader-fork"):  # torch came with the parent's memory
            assert seen["line"] == parent["line"], seen
        else:  # a fresh interpreter: planned in the child
            assert seen["line"] == (
                f"cluster: none here: a child (pid {seen['pid']}) of the task's process "
                f"(pid {parent['pid']}), which holds its place; nothing set or checked"
            )
    if model == "mp.spawn":
        assert sorted(s["value"] for s in children) == [3.0, 3.0]  # 1 + 2, all-reduced
        assert {s["master"] for s in children} == {"localhost"}


@pytest.mark.parametrize("framework", ["jax", "keras"])
def test_tensorflow_as_the_data_loader_of_a_jax_job_is_no_task(start, framework: str) -> None:
    """JAX (directly, or as Keras 3's backend) forms the group, then tf.data loads the
    batches: TensorFlow is the data loader, gets no TF_CONFIG and watches no peer, so the
    job trains past DIST_STARTUP_TIMEOUT (nothing of TensorFlow's listens on the ports)."""
    slow = {"DATA": "tf", "STEPS": "8", "STEP_S": "1.5", "DIST_STARTUP_TIMEOUT": "4"}
    processes = [start({**env, **slow, "TFBOOT_LOG": "info"}, framework, "multi")
                 for env in tasks(2)]  # fmt: skip
    ended = [(p, *p.communicate(timeout=LIMIT_S)) for p in processes]
    failed = [f"task {i}: {err[-3000:]}" for i, (p, _, err) in enumerate(ended) if p.returncode]
    assert not failed, failed
    for _, out, err in ended:
        assert "cluster: none for TensorFlow (" in err and "TF_CONFIG not set" in err, err
        assert "peer watcher" not in err.replace("no peer watcher", ""), err
        assert json.loads(out.splitlines()[-1])["world"] == 2


def test_jax_checks_the_replicas_per_worker_once_initialize_returned(start) -> None:
    """Task 0 is told one local device, task 1 two: JAX on this CPU has one each."""
    runs = [
        start({**env, "DIST_REPLICAS_PER_WORKER": str(i + 1)}, "jax", "multi")
        for i, env in enumerate(tasks(2))
    ]
    # The error is raised at once; JAX's exit handler then waits some 30 s at its shutdown
    # barrier for task 0, which waits in its first collective: the test does not.
    raised = next((line for line in runs[1].stderr if line.startswith("tfboot.ConfigError")), "")
    assert raised.rstrip("\n") == (
        "tfboot.ConfigError: DIST_REPLICAS_PER_WORKER='2' cannot be met on this host: this JAX "
        "process has 1 local device(s) (cpu), but every worker must have 2; give every worker "
        "the same GPUs, or fix DIST_REPLICAS_PER_WORKER"
    )


@pytest.mark.slow
def test_a_plain_torchrun_in_each_task_joins_the_job(start) -> None:
    """Two tasks, each ``torchrun --nproc-per-node`` from DIST_REPLICAS_PER_WORKER and
    nothing else: four ranks, as two nodes of two."""
    runs = []
    for env in tasks(2):
        env = {**env, "DIST_REPLICAS_PER_WORKER": "2"}
        runs.append(start(env, "torch", "multi", launcher=("-m", "torch.distributed.run")))
    found = []
    for process in runs:
        out, err = process.communicate(timeout=LIMIT_S + 10)
        assert process.returncode == 0, err[-3000:]
        found += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(f["rank"] for f in found) == [0, 1, 2, 3] and {f["world"] for f in found} == {4}
    assert sorted(tuple(f["local"]) for f in found) == [("0", "2"), ("0", "2"), ("1", "2"),
                                                        ("1", "2")]  # fmt: skip
    weights = reference("torch")
    assert all(f["weights"] == pytest.approx(weights, rel=1e-12) for f in found)


def test_a_standalone_torchrun_in_each_task_trains_as_without_tfboot(start) -> None:
    """PyTorch's recipe for one node, ``torchrun --standalone --nproc-per-node=2``, in each
    of two tasks: each task is a job of its own (two ranks), as without tfboot; tfboot's line
    says so and its workers are no tasks of the cluster."""
    runs = []
    for env in tasks(2):
        env = {**env, "DIST_STARTUP_TIMEOUT": "60", "TFBOOT_LOG": "info"}
        launcher = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2")
        runs.append(start(env, "torch", "multi", launcher=launcher))
    for process in runs:
        out, err = process.communicate(timeout=LIMIT_S + 10)
        assert process.returncode == 0, err[-3000:]
        found = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert sorted(f["rank"] for f in found) == [0, 1] and {f["world"] for f in found} == {2}
        assert "cluster: PyTorch under torchrun --standalone, a job of this node alone" in err
        assert "cluster: none here: a child (pid " in err  # each worker


def test_torchrun_s_rendezvous_ends_at_the_startup_timeout(start) -> None:
    """Task 0 of two under ``torchrun --nproc-per-node=1``, its peer never started: torchrun's
    agent ends once DIST_STARTUP_TIMEOUT=4 ran out in its rendezvous (its own static
    rendezvous waits 600 s)."""
    env = {**tasks(2)[0], "DIST_STARTUP_TIMEOUT": "4", "TFBOOT_LOG": "info"}
    process = start(env, "torch", "multi", launcher=("-m", "torch.distributed.run",
                                                       "--nproc-per-node=1"))  # fmt: skip
    _, err = process.communicate(timeout=LIMIT_S)
    # ended by itself, not by the test's kill at LIMIT_S (timeout's 137)
    assert process.returncode not in (0, KILLED), err[-3000:]
    assert "PET_RDZV_CONF=timeout=4,join_timeout=4" in err
    assert "Timed out after" in err or "timed out" in err.lower(), err[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize(("framework", "cause"), [("torch", "peer"),
                                                  ("jax", "heartbeat")])  # fmt: skip
def test_a_task_lost_mid_run_ends_the_others_within_the_grace(
    start, framework: str, cause: str
) -> None:
    lose = {"STEPS": "100000", "STEP_S": "0.05", "LOSE_RANK": "2", "LOSE_STEP": "5"}
    processes = [start({**env, **lose}, framework, "multi") for env in tasks(3)]
    lost_out, _ = processes[2].communicate(timeout=LIMIT_S)
    assert " lost at " in lost_out, lost_out  # rank 2 killed itself mid-run
    for process in processes[:2]:
        _, err = process.communicate(timeout=LIMIT_S)
        # ended by the loss (named below), not by the test's kill at LIMIT_S
        assert process.returncode not in (0, KILLED), err[-2000:]
        assert cause in err, err[-2000:]


def test_off_sets_nothing_for_any_framework() -> None:
    code = (
        "import json, os, torch, jax\n"
        "names = ('MASTER_ADDR', 'RANK', 'WORLD_SIZE', 'KERAS_DISTRIBUTION_NUM_PROCESSES')\n"
        "print(json.dumps([n for n in names if n in os.environ]))\n"
        "print(getattr(jax.distributed.initialize, '__tfboot_wraps__', None) is None)\n"
        "import sys; print([m for m in sys.modules if m.startswith('tfboot.cluster.')])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=scenario_env({"DISTRIBUTED": "off", **K8S}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "True", "[]"] and "cluster" not in done.stderr


def test_show_says_what_each_installed_framework_gets() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tfboot", "show", "--json"],
        env=scenario_env({"DISTRIBUTED": "k8s", **K8S}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    clusters = json.loads(done.stdout)["clusters"]
    assert clusters["PyTorch"]["launch"]["set"]["RANK"] == "2"
    assert clusters["JAX"]["launch"]["arguments"]["process_id"] == 2
    assert clusters["PyTorch"]["tf_config"] is None


def test_check_and_show_say_what_each_import_refuses() -> None:
    """DIST_TERM_GRACE is TensorFlow's and JAX's: PyTorch's import refuses it. ``check``
    fails naming PyTorch, as ``import torch`` would; ``show`` lists the error in place of
    PyTorch's cluster, and JAX's plan as it is."""
    env = scenario_env({"DISTRIBUTED": "k8s", **K8S, "DIST_TERM_GRACE": "10"})
    done = subprocess.run([sys.executable, "-m", "tfboot", "check", "--json"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stdout
    problems = json.loads(done.stdout)["problems"]
    assert [(p["variable"], p["framework"]) for p in problems] == [("DIST_TERM_GRACE", "PyTorch")]
    imported = subprocess.run([sys.executable, "-c", "import torch"], env=env,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert imported.returncode != 0 and "DIST_TERM_GRACE" in imported.stderr
    text = subprocess.run([sys.executable, "-m", "tfboot", "check"], env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert text.returncode == 1 and "all valid" not in text.stdout
    assert text.stderr.startswith("tfboot: error: PyTorch: DIST_TERM_GRACE='10' ")
    tensorflow = subprocess.run([sys.executable, "-m", "tfboot", "check", "--framework",
                                 "tensorflow", "--framework", "jax"], env=env,
                                capture_output=True, text=True, timeout=120)  # fmt: skip
    assert tensorflow.returncode == 0 and "all valid" in tensorflow.stdout, tensorflow.stderr
    shown = subprocess.run([sys.executable, "-m", "tfboot", "show", "--json"], env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    found = json.loads(shown.stdout)
    assert list(found["refused"]) == ["PyTorch"]
    assert found["clusters"]["PyTorch"] == {"error": found["refused"]["PyTorch"]}
    assert found["clusters"]["JAX"]["launch"]["arguments"]["heartbeat_timeout_seconds"] == 10


def test_doctor_gives_each_framework_its_cluster_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tfboot", "doctor", "--framework", "torch", "--framework", "jax"],
        env=scenario_env({"DISTRIBUTED": "k8s", **K8S, "TFBOOT_LOG": "quiet"}),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        "  cluster: PyTorch rank 2 of 3 (k8s; worker 2, index from JOB_COMPLETION_INDEX=2); "
        "rank 0 at w-0.train:2222 (port: default 2222 (k8s)); set MASTER_ADDR=w-0.train "
        "MASTER_PORT=2222 WORLD_SIZE=3 RANK=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1" in lines
    )
    assert any(line.startswith("  cluster: JAX rank 2 of 3") for line in lines)

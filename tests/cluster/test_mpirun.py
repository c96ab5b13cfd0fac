"""Open MPI's ``mpirun`` (Debian's ``openmpi-bin``): one ``mpirun`` line forms the job for
TensorFlow, PyTorch, JAX and Keras 3, whatever the framework.

The process tests run the unchanged training scripts of this folder under a real
``mpirun -np N --oversubscribe`` on this machine's two cores, configured only by what tfboot
set at the framework's import from ``OMPI_COMM_WORLD_*``: every rank ends with the weights
of one process trained alone. The rule tests take the variables a real ``mpirun`` gave its
ranks, recorded here; where a job across nodes is needed, the recorded local size is
changed to what a rank on a second node would see (a stand-in: this machine has one node).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from support import free_ports, scenario_env, unavailable
from tfboot.cluster import RUNS
from tfboot.cluster.engines import (
    BY_NAME,
    PORT_BLOCK,
    PORTS,
    detect,
    drawn_port,
    identify,
)
from tfboot.cluster.plan import plan_cluster
from tfboot.errors import ConfigError
from tfboot.frameworks import ADAPTERS
from tfboot.settings import resolve

HERE = Path(__file__).parent
LIMIT_S = 240
OPTIONS = ("--allow-run-as-root", "--oversubscribe")  # root here; 3 ranks on 2 cores


def mpirun(tmp_path: Path, ranks: int, env: dict[str, str], *argv: str,
           ) -> list[tuple[str, str]]:  # fmt: skip
    """Each rank's (stdout, stderr) of ``mpirun -np ranks argv``, the run asserted to pass."""
    found = shutil.which("mpirun")
    if found is None:
        unavailable("mpirun is not installed (scripts/test.sh installs Debian's openmpi-bin)")
    out = tmp_path / "out"
    command = [found, *OPTIONS, "-np", str(ranks), "--output-filename", str(out), *argv]
    done = subprocess.run(command, env=scenario_env(env), capture_output=True, text=True,
                          timeout=LIMIT_S, cwd=tmp_path)  # fmt: skip
    files = [out / "1" / f"rank.{r}" for r in range(ranks)]
    read = [(_text(f / "stdout"), _text(f / "stderr")) for f in files]
    assert done.returncode == 0, "\n".join(err[-3000:] for _, err in read) + done.stderr
    return read


def held(ranks: int) -> str:
    """``DIST_PORT`` for a job of ``ranks`` on this machine: consecutive ports held for the
    test (``free_ports``), where a port drawn from the job could meet another test's."""
    return str(free_ports(ranks)[0])


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def trained_alone(script: str, *argv: str) -> list[float]:
    done = subprocess.run([sys.executable, str(HERE / script), *argv, "single"],
                          env=scenario_env(), capture_output=True, text=True,
                          timeout=LIMIT_S)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])["weights"]


@pytest.mark.parametrize(("framework", "ranks"), [("torch", 3), ("jax", 2), ("keras", 2)])
@pytest.mark.multiworker  # several framework processes together, one group at a time
@pytest.mark.xdist_group("multiworker")
def test_one_mpirun_line_forms_the_group_and_trains_as_one_process(
    tmp_path: Path, framework: str, ranks: int
) -> None:
    env = {"DISTRIBUTED": "auto", "DIST_STARTUP_TIMEOUT": "120", "DIST_PORT": held(ranks)}
    read = mpirun(tmp_path, ranks, env, sys.executable, str(HERE / "dp_train.py"), framework,
                  "multi")  # fmt: skip
    found = [json.loads(out.splitlines()[-1]) for out, _ in read]
    assert [f["rank"] for f in found] == list(range(ranks))
    assert {f["world"] for f in found} == {ranks}
    weights = found[0]["weights"]
    assert all(f["weights"] == weights for f in found)
    assert weights == pytest.approx(trained_alone("dp_train.py", framework), rel=1e-12)
    for rank, (_, err) in enumerate(read):
        assert f"rank {rank} of {ranks} (mpirun; worker {rank}, index from " in err
    if framework == "torch":  # LOCAL_RANK and LOCAL_WORLD_SIZE as mpirun placed the ranks
        assert [f["local"] for f in found] == [[str(r), str(ranks)] for r in range(ranks)]


@pytest.mark.multiworker  # several framework processes together, one group at a time
@pytest.mark.xdist_group("multiworker")
def test_tensorflow_s_multi_worker_strategy_under_mpirun(tmp_path: Path) -> None:
    port = held(2)
    read = mpirun(tmp_path, 2, {"DISTRIBUTED": "mpirun", "DIST_PORT": port}, sys.executable,
                  str(HERE / "mw_train.py"), "multi")  # fmt: skip
    found = [json.loads(out.splitlines()[-1]) for out, _ in read]
    assert [f["rank"] for f in found] == [0, 1] and {f["replicas"] for f in found} == {2}
    assert found[0]["weights"] == pytest.approx(trained_alone("mw_train.py"), rel=1e-6)
    config = json.loads(found[1]["tf_config"])
    base = int(port)
    assert config == {"cluster": {"worker": [f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"]},
                      "task": {"type": "worker", "index": 1}}  # fmt: skip
    assert "cluster: worker 1 of 2 (mpirun; TF_CONFIG built" in read[1][1]


RECORD = """import json, os
print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(("OMPI_", "PMIX_"))}))
"""


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    """What a real ``mpirun -np 2`` gave each rank: its ``OMPI_*`` and ``PMIX_*`` variables."""
    folder = tmp_path_factory.mktemp("mpirun")
    read = mpirun(folder, 2, {}, sys.executable, "-c", RECORD)
    return [json.loads(out) for out, _ in read]


def plan(framework: str, env: dict[str, str], mode: str = "auto"):
    settings = resolve({**env, "DISTRIBUTED": mode}, ("DISTRIBUTED",))
    assert settings.cluster is not None
    adapter = next(a for a in ADAPTERS.values() if framework == a.NAME)
    facts = {"agent": None, "visible": None, "version": None}
    return plan_cluster(adapter.LAUNCH, framework, mode, settings.cluster, env, facts)


def error(env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as raised:
        plan("PyTorch", env)
    return str(raised.value)


def test_auto_finds_mpirun_s_ranks_before_slurm_s(recorded: list[dict[str, str]]) -> None:
    """A rank that mpirun started inside a Slurm job sees srun's variables of mpirun's own
    daemons too: the ranks are mpirun's."""
    cluster = resolve({"DISTRIBUTED": "auto"}).cluster
    slurm = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "node9"}
    assert detect("auto", cluster, {**recorded[1], **slurm}) == "mpirun"
    identity = identify("auto", cluster, recorded[1])
    assert identity.engine == "mpirun" and identity.build
    assert (identity.cluster.task_type, identity.cluster.task_index) == ("worker", 1)


def test_each_framework_gets_the_same_ranks(recorded: list[dict[str, str]]) -> None:
    torch = plan("PyTorch", recorded[1]).launch
    host, port = torch.environ["MASTER_ADDR"], int(torch.environ["MASTER_PORT"])
    assert (host, torch.environ["RANK"], torch.environ["WORLD_SIZE"]) == ("127.0.0.1", "1", "2")
    assert (torch.environ["LOCAL_RANK"], torch.environ["LOCAL_WORLD_SIZE"]) == ("1", "2")
    jax = plan("JAX", recorded[1]).launch.arguments
    assert jax["coordinator_address"] == f"127.0.0.1:{port}"
    assert (jax["num_processes"], jax["process_id"]) == (2, 1)
    assert "cluster_detection_method" not in jax  # JAX's own Open MPI detection agrees
    tensorflow = plan("TensorFlow", recorded[1]).launch
    config = json.loads(tensorflow.environ["TF_CONFIG"])
    assert config["cluster"]["worker"] == [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]
    namespace = recorded[1]["PMIX_NAMESPACE"]  # the same in every rank: the job's port block
    assert namespace == recorded[0]["PMIX_NAMESPACE"]
    assert port == drawn_port(zlib.crc32(namespace.encode()))
    assert (port - PORTS[0]) % PORT_BLOCK == 0
    ours = plan("PyTorch", {**recorded[1], "DIST_PORT": "23000"}).launch.environ
    assert ours["MASTER_PORT"] == "23000"


def test_ranks_across_nodes_need_each_rank_s_host(recorded: list[dict[str, str]]) -> None:
    """Rank 1 alone on a second node (stand-in: the recorded local size and rank set as
    mpirun sets them there)."""
    second = {**recorded[1], "OMPI_COMM_WORLD_LOCAL_SIZE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}
    missing = error(second)
    assert "DIST_HOSTS" in missing and "mpirun tells no rank where the others run" in missing
    hosts = {**second, "DIST_HOSTS": "worker=node0,node1", "DIST_PORT": "2300"}
    torch = plan("PyTorch", hosts).launch.environ
    assert (torch["MASTER_ADDR"], torch["MASTER_PORT"], torch["LOCAL_RANK"]) == (
        "node0",
        "2300",
        "0",
    )
    wrong = error({**second, "DIST_HOSTS": "worker=node0,node0"})
    assert "OMPI_COMM_WORLD_LOCAL_RANK='0'" in wrong and "local rank 1 of 2" in wrong
    short = error({**second, "DIST_HOSTS": "worker=node0"})
    assert "DIST_HOSTS lists 1 worker host(s), for 2 worker rank(s)" in short


def test_the_contract_s_counts_must_be_mpirun_s(recorded: list[dict[str, str]]) -> None:
    assert "it counts 3 task(s), but mpirun started 2" in error({**recorded[0], "DIST_TASKS": "3"})
    chief = plan("PyTorch", {**recorded[0], "DIST_TASKS": "chief=1,worker=1"})
    assert chief.identity.cluster.task_type == "chief"
    named = error({**recorded[1], "DIST_TASK_INDEX": "0"})
    assert "mpirun's rank (OMPI_COMM_WORLD_RANK=1) makes this task worker:1" in named


def test_the_usage_report_groups_the_ranks_as_one_run(recorded: list[dict[str, str]]) -> None:
    found = [next(run.of(env) for run in RUNS if run.of(env)) for env in recorded]
    assert found[0][0] == found[1][0] and found[0][0].startswith("mpirun-")
    assert [lead for _, lead in found] == [True, False]
    assert BY_NAME["mpirun"].run is RUNS[0]  # the engine's own, before Slurm's


def test_check_puts_one_node_in_place_of_mpirun_s_variables() -> None:
    """``tfboot check`` before the job runs: mpirun's variables exist only in a rank."""
    engine = BY_NAME["mpirun"]
    cluster = resolve({"DISTRIBUTED": "mpirun", "DIST_TASKS": "4"}).cluster
    (placed,), left = engine.at_run_time(cluster, {"DIST_TASKS": "4"})
    assert (
        placed["OMPI_COMM_WORLD_SIZE"] == "4"
        and left == "mpirun's variables come at run time: checked as a job of 4 rank(s) on one node"
    )
    done = subprocess.run(
        [sys.executable, "-m", "tfboot", "check"],
        env=scenario_env({"DISTRIBUTED": "mpirun", "DIST_TASKS": "4"}),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mpirun's variables come at run time" in done.stdout + done.stderr

"""The TF_CONFIG builder and validator for each engine's environment (no TensorFlow)."""

from __future__ import annotations

import json

import pytest
from support import cluster_plan, last_json, run_module
from tfboot.adapters import Plan
from tfboot.cluster import NAMES
from tfboot.cluster.hostlist import expand_counts, expand_hosts
from tfboot.cluster.variables import PARSERS
from tfboot.errors import ConfigError
from tfboot.settings import resolve

K8S = {"DIST_TASKS": "2", "DIST_HOSTS": "worker=train-{i}.train", "JOB_COMPLETION_INDEX": "1"}
SLURM = {
    "SLURM_PROCID": "3",
    "SLURM_STEP_NODELIST": "node[9-10]",
    "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    "SLURMD_NODENAME": "node10",
    "SLURM_LOCALID": "1",
}


def built(mode: str, env: dict[str, str]) -> dict:
    config = cluster_plan(mode, env).environ.get("TF_CONFIG")
    assert config is not None
    return json.loads(config)


def error(mode: str, env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        cluster_plan(mode, env)
    return str(info.value)


def test_every_dist_variable_has_a_parser() -> None:
    assert tuple(PARSERS) == NAMES


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node[9-10]", ["node9", "node10"]),
        ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
        ("a1,b[1-2]", ["a1", "b1", "b2"]),
        ("n[10-11]-ib", ["n10-ib", "n11-ib"]),
        ("zeta,alpha", ["zeta", "alpha"]),  # Slurm's order, never sorted
    ],
)
def test_hostlists_expand_in_slurm_order(text: str, hosts: list[str]) -> None:
    assert expand_hosts(text) == hosts


@pytest.mark.parametrize(
    "text", ["", "n[1-", "n[3-1]", "n[a-b]", "[1-2]", "n[1-2]x[1]", "n[0-9999999]"]
)
def test_bad_hostlists_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError, match="SLURM_STEP_NODELIST"):
        expand_hosts(text)


def test_tasks_per_node() -> None:
    assert expand_counts("2(x3),1") == [2, 2, 2, 1]
    for bad in ("", "0", "2(x0)", "x", "2(3)"):
        with pytest.raises(ConfigError, match="SLURM_STEP_TASKS_PER_NODE"):
            expand_counts(bad)


class TestK8s:
    def test_indexed_job(self) -> None:
        assert built("k8s", K8S) == {
            "cluster": {"worker": ["train-0.train:2222", "train-1.train:2222"]},
            "task": {"type": "worker", "index": 1},
        }

    def test_jobset_with_chief_and_explicit_ports(self) -> None:
        env = {
            "DIST_TASKS": "chief=1,worker=2",
            "DIST_HOSTS": "chief=js-chief-0-0.js;worker=js-worker-0-{i}.js:3000",
            "DIST_TASK_TYPE": "worker",  # from the replicatedjob-name label
            "JOB_COMPLETION_INDEX": "0",
            "DIST_PORT": "4000",
        }
        assert built("k8s", env) == {
            "cluster": {
                "chief": ["js-chief-0-0.js:4000"],
                "worker": ["js-worker-0-0.js:3000", "js-worker-0-1.js:3000"],
            },
            "task": {"type": "worker", "index": 0},
        }

    def test_explicit_list_and_ipv6(self) -> None:
        env = {
            "DIST_TASKS": "worker=2",
            "DIST_HOSTS": "10.0.0.5:2222,[fd00::6]",
            "DIST_TASK_INDEX": "0",
        }
        assert built("k8s", env)["cluster"] == {"worker": ["10.0.0.5:2222", "[fd00::6]:2222"]}

    @pytest.mark.parametrize(
        ("kind", "index", "peers"),
        [
            ("worker", "0", ["w-1.t:2222"]),  # not the evaluator: it starts no server
            ("evaluator", "0", []),  # an evaluator waits for nobody
        ],
    )
    def test_nobody_watches_the_evaluator(self, kind: str, index: str, peers: list[str]) -> None:
        env = {
            "DIST_TASKS": "worker=2,evaluator=1",
            "DIST_HOSTS": "worker=w-{i}.t;evaluator=e-{i}.t",
            "DIST_TASK_TYPE": kind,
            "DIST_TASK_INDEX": index,
        }
        assert cluster_plan("k8s", env).peers == peers

    def test_index_out_of_range(self) -> None:
        # The error names the variable the index came from, with its value as given.
        text = error("k8s", {**K8S, "JOB_COMPLETION_INDEX": "2"})
        assert "JOB_COMPLETION_INDEX='2' is invalid: expected a worker index from 0 to 1" in text
        huge = "9" * 40
        text = error("k8s", {**K8S, "DIST_TASK_INDEX": huge})
        assert f"DIST_TASK_INDEX='{huge}' is invalid: expected a task index from 0 to 99999" in text

    def test_required_variables_are_all_named(self) -> None:
        message = error("k8s", {})
        for name in ("DIST_TASKS", "DIST_HOSTS", "DIST_TASK_INDEX"):
            assert name in message

    def test_hosts_must_match_tasks(self) -> None:
        message = error("k8s", {**K8S, "DIST_HOSTS": "worker=a,b,c;ps=p-{i}"})
        assert "lists 3 worker host(s), DIST_TASKS counts 2" in message
        assert "DIST_TASKS has no ps" in message

    def test_same_address_twice(self) -> None:
        env = {**K8S, "DIST_HOSTS": "worker=a:1,a:1"}
        assert "'a:1' is used by both worker:0 and worker:1" in error("k8s", env)

    @pytest.mark.parametrize(
        ("name", "value", "accepted"),
        [
            ("DIST_TASKS", "master=1,worker=2", "rename the TFJob replica Master to Chief"),
            ("DIST_TASKS", "chief=2", "at most one chief"),
            ("DIST_TASKS", "worker=0", "type=count pairs"),
            ("DIST_HOSTS", "gpu=x-{i}", "types are chief"),
            ("DIST_HOSTS", "worker=::1", "IPv6 host in brackets"),
            ("DIST_HOSTS", "worker=a:99999", "port from 1 to 65535"),
            ("DIST_TASK_TYPE", "master", "rename the TFJob replica Master to Chief"),
            ("DIST_TASK_INDEX", "-1", "a task index from 0 to 99999"),
            ("DIST_PORT", "0", "port from 1 to 65535"),
            ("DIST_REPLICAS_PER_WORKER", "two", "a count from 1 to 4096"),
            ("DIST_STARTUP_TIMEOUT", "nan", "a number of seconds from 1 to 604800"),
        ],
    )
    def test_bad_values_name_variable_and_accepted(
        self, name: str, value: str, accepted: str
    ) -> None:
        message = error("k8s", {**K8S, name: value})
        assert f"{name}={value!r}" in message and accepted in message

    @pytest.mark.parametrize("value", ["abc", "0", "-1", "2.5"])
    def test_a_task_count_bound_is_named_only_when_exceeded(self, value: str) -> None:
        assert "at most" not in error("k8s", {**K8S, "DIST_TASKS": value})
        assert "at most 100000 tasks" in error("k8s", {**K8S, "DIST_TASKS": "100001"})

    def test_existing_tf_config_is_never_overridden(self) -> None:
        message = error("k8s", {**K8S, "TF_CONFIG": '{"cluster": {}}'})
        assert "TF_CONFIG is already set" in message and "DISTRIBUTED=auto" in message

    def test_the_tf_config_it_builds_is_accepted_when_inherited(self) -> None:
        tf_config = cluster_plan("k8s", K8S).environ.get("TF_CONFIG")
        assert tf_config is not None
        cluster = cluster_plan("k8s", {**K8S, "TF_CONFIG": tf_config})
        assert (
            cluster.environ.get("TF_CONFIG") is None and cluster.environ == {}
        )  # nothing set again
        assert cluster.peers == ["train-0.train:2222"]
        assert "TF_CONFIG inherited, the one tfboot builds here, checked" in cluster.line()
        assert cluster.identity.sources["tf_config"] == "inherited"
        other = tf_config.replace('"index":1', '"index":0')
        assert "TF_CONFIG is already set" in error("k8s", {**K8S, "TF_CONFIG": other})


class TestSlurm:
    def test_the_default_port_is_drawn_from_the_job_and_the_step(self) -> None:
        """Two jobs, or two steps of one job, whose tasks share a node take different ports;
        every rank of one step the same; DIST_PORT, given, is the port."""

        def base(job: str, step: str, **more: str) -> int:
            env = {**SLURM, "SLURM_JOB_ID": job, "SLURM_STEP_ID": step, **more}
            return int(cluster_plan("slurm", env).identity.cluster.address.rpartition(":")[2]) - 1

        assert base("7", "0") == 11792 and base("8", "0") == 11792 + 256
        assert base("7", "1") == 11792 + 16
        assert len({base(str(job), "0") for job in range(1000, 1000 + 1423)}) == 1423
        assert base("7", "0", SLURM_PROCID="0", SLURMD_NODENAME="node9", SLURM_LOCALID="0") == (
            11792 - 1
        )  # rank 0 is at the base itself
        assert base("7", "0", DIST_PORT="9000") == 9000
        line = cluster_plan("slurm", {**SLURM, "SLURM_JOB_ID": "7"}).line()
        assert (
            "port 11793 (11792, drawn from Slurm job 7 step 0 (DIST_PORT not set) + rank on "
            in (line)
        )

    def test_block_distribution_node9_node10(self) -> None:
        assert built("slurm", SLURM) == {
            # no DIST_PORT: the step's block (job 0 step 0 here: 10000), plus the rank on the node
            "cluster": {"worker": ["node9:10000", "node9:10001", "node10:10000", "node10:10001"]},
            "task": {"type": "worker", "index": 3},
        }

    def test_ranks_fill_chief_then_workers_then_ps(self) -> None:
        env = {
            "SLURM_PROCID": "5",
            "SLURM_STEP_NODELIST": "gpu[01-03,07]",
            "SLURM_STEP_TASKS_PER_NODE": "2(x3),1",
            "DIST_TASKS": "ps=1,chief=1,worker=5",
            "DIST_PORT": "7000",
        }
        assert built("slurm", env) == {
            "cluster": {
                "chief": ["gpu01:7000"],
                "worker": ["gpu01:7001", "gpu02:7000", "gpu02:7001", "gpu03:7000", "gpu03:7001"],
                "ps": ["gpu07:7000"],
            },
            "task": {"type": "worker", "index": 4},
        }

    def test_wrong_node_is_an_error(self) -> None:
        message = error("slurm", {**SLURM, "SLURMD_NODENAME": "node9"})
        assert "SLURMD_NODENAME='node9'" in message and "puts it on node10" in message

    def test_task_count_must_match_the_step(self) -> None:
        assert "counts 3 task(s), but the Slurm step has 4" in error(
            "slurm", {**SLURM, "DIST_TASKS": "chief=1,worker=2"}
        )

    def test_node_count_mismatch(self) -> None:
        message = error("slurm", {**SLURM, "SLURM_STEP_TASKS_PER_NODE": "2(x3)"})
        assert "counts 3 node(s), SLURM_STEP_NODELIST names 2" in message

    def test_dist_hosts_is_not_silently_ignored(self) -> None:
        assert "DIST_HOSTS" in error("slurm", {**SLURM, "DIST_HOSTS": "a-{i}"})

    def test_never_touches_cuda_visible_devices(self) -> None:
        env = {**SLURM, "CUDA_VISIBLE_DEVICES": "3"}
        cluster = cluster_plan("slurm", env)
        assert set(cluster.environ) == {"TF_CONFIG"} and env["CUDA_VISIBLE_DEVICES"] == "3"


TFJOB = {
    "cluster": {"master": ["job-master-0.ns.svc:2222"], "worker": ["job-worker-0.ns.svc:2222"]},
    "task": {"type": "master", "index": 0},
    "environment": "cloud",
}


class TestFoundTfConfig:
    def test_tfjob_master_gets_the_rename_hint(self) -> None:
        message = error("auto", {"TF_CONFIG": json.dumps(TFJOB)})
        assert "'master'" in message and "rename the TFJob replica Master to Chief" in message

    def test_tfjob_with_chief_and_environment_cloud_is_checked_not_rebuilt(self) -> None:
        tfjob = json.dumps(TFJOB).replace("master", "chief")
        cluster = cluster_plan("auto", {"TF_CONFIG": tfjob})
        assert cluster.identity.engine == "tf_config" and cluster.environ.get("TF_CONFIG") is None
        assert cluster.peers == ["job-worker-0.ns.svc:2222"]

    def test_ray_shape(self) -> None:
        ray = {
            "cluster": {"worker": ["10.0.0.1:41234", "10.0.0.2:40111"]},
            "task": {"type": "worker", "index": 1},
        }
        cluster = cluster_plan("auto", {"TF_CONFIG": json.dumps(ray)})
        assert cluster.peers == ["10.0.0.1:41234"] and "worker 1 of 2" in cluster.line()

    @pytest.mark.parametrize(
        ("config", "why"),
        [
            ('{"cluster": {"worker": ["a:1"]', "not valid JSON: Expecting ',' delimiter at line 1"),
            ("[1]", "not a JSON object"),
            (
                '{"cluster": {"chief": ["a:1", "b:1"], "worker": ["c:1"]}, "task": {}}',
                "at most one chief",
            ),
            (
                '{"cluster": {"worker": ["a:1"], "evaluator": ["e:1", "f:1"]}, "task": {}}',
                "at most one evaluator",
            ),
            (
                '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}',
                "out of range",
            ),
            (
                '{"cluster": {"worker": ["a:x"]}, "task": {"type": "worker", "index": 0}}',
                "integer port",
            ),
            (
                '{"cluster": {"worker": ["fd00::1:22"]}, "task": {"type": "worker", "index": 0}}',
                "brackets",
            ),
            (
                '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": true}}',
                "not an integer",
            ),
        ],
    )
    def test_tensorflow_rules(self, config: str, why: str) -> None:
        message = error("auto", {"TF_CONFIG": config})
        assert message.startswith("TF_CONFIG=") or "TF_CONFIG=" in message
        assert why in message

    def test_sparse_form_is_read_by_index(self) -> None:
        sparse = {"cluster": {"worker": {"1": "b:1", "0": "a:1", "2": "c:1"}}}
        config = {**sparse, "task": {"type": "worker", "index": 1}}
        cluster = cluster_plan("auto", {"TF_CONFIG": json.dumps(config)})
        assert cluster.identity.cluster is not None
        assert cluster.identity.cluster.cluster == {"worker": ["a:1", "b:1", "c:1"]}
        assert cluster.peers == ["a:1", "c:1"]

    @pytest.mark.parametrize(
        ("keys", "why"),
        [
            ([" 0", "1"], "index ' 0', not 0, 1, 2"),
            (["+1", "0"], "index '+1', not 0, 1, 2"),
            (["1_0", "0"], "index '1_0', not 0, 1, 2"),
            (["\u0660", "1"], "not 0, 1, 2"),  # ARABIC-INDIC DIGIT ZERO
            (["01", "1"], "index 1 twice"),
            (["0", "2"], "gaps in its indexes [0, 2]"),
        ],
    )
    def test_sparse_form_takes_only_plain_digit_keys(self, keys: list[str], why: str) -> None:
        workers = {key: f"h{i}:1" for i, key in enumerate(keys)}
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}}
        message = error("auto", {"TF_CONFIG": json.dumps(config)})
        assert message.startswith("TF_CONFIG=") and why in message

    def test_evaluator_may_be_absent_from_the_cluster(self) -> None:
        config = {"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}}
        assert cluster_plan("auto", {"TF_CONFIG": json.dumps(config)}).peers == []

    def test_a_huge_value_is_not_echoed(self) -> None:
        message = error("auto", {"TF_CONFIG": "{" + "x" * 100_000})
        assert len(message) < 600


class TestAuto:
    def test_detects_slurm_then_k8s_then_single(self) -> None:
        assert cluster_plan("auto", SLURM).identity.engine == "slurm"
        assert cluster_plan("auto", K8S).identity.engine == "k8s"
        single = cluster_plan("auto", {"JOB_COMPLETION_INDEX": "0"})
        assert single.identity.engine == "single" and single.environ.get("TF_CONFIG") is None

    def test_distributed_is_validated_with_the_contract(self) -> None:
        assert resolve({}).distributed == "off"
        with pytest.raises(ConfigError, match=r"DISTRIBUTED='yes'.*off, auto, k8s, mpirun, slurm"):
            resolve({"DISTRIBUTED": "yes"})

    def test_dist_variables_from_the_env_file(self, tmp_path) -> None:
        path = tmp_path / "tfboot.env"
        path.write_text("DISTRIBUTED=k8s\nDIST_TASKS=2\nDIST_HOSTS=worker=w-{i}.svc\n")
        env = {"TFBOOT_ENV_FILE": str(path), "JOB_COMPLETION_INDEX": "0"}
        assert resolve(env).distributed == "k8s"
        cluster = cluster_plan("k8s", env)
        assert cluster.identity.sources["tasks"] == f"DIST_TASKS=2 (file {path})"


TF = "TensorFlow"


class TestPlan:
    def test_local_replicas(self) -> None:
        assert Plan(TF, gpu_count=0).local_replicas() == 1
        assert Plan(TF, gpu_count=2).local_replicas() == 2
        assert Plan(TF, gpu_count=2, logical_mb={0: (1024, 1024)}).local_replicas() == 3
        plan = Plan(TF, gpu_count=2, visible=(1,), logical_mb={1: (512,) * 4})
        assert plan.local_replicas() == 4

    def test_replicas_mismatch_names_both_numbers(self) -> None:
        plan = Plan(TF, gpu_count=1, logical_mb={0: (1024, 1024)})
        with pytest.raises(ConfigError) as info:
            cluster_plan("k8s", {**K8S, "DIST_REPLICAS_PER_WORKER": "1"}, plan)
        assert "has 2 local replica(s)" in str(info.value) and "must have 1" in str(info.value)

    def test_split_on_cpu_warns(self) -> None:
        cluster = cluster_plan("k8s", K8S, Plan(TF, cpu_logical=2))
        assert any("one CPU replica per worker" in w for w in cluster.warnings)

    def test_proxy_warning_unless_no_proxy_covers_the_peers(self) -> None:
        env = {**K8S, "HTTPS_PROXY": "http://proxy:3128"}
        assert any("HTTPS_PROXY is set" in w for w in cluster_plan("k8s", env).warnings)
        covered = {**env, "no_proxy": "localhost,.train"}
        assert not any("proxy" in w for w in cluster_plan("k8s", covered).warnings)
        ips = {"DIST_TASKS": "2", "DIST_HOSTS": "10.0.0.1,10.0.0.2", "DIST_TASK_INDEX": "0"}
        cidr = {**ips, "http_proxy": "http://p:1", "NO_PROXY": "10.0.0.0/8"}
        assert not any("proxy" in w for w in cluster_plan("k8s", cidr).warnings)

    def test_keras3_warning_says_what_works(self) -> None:
        warnings = cluster_plan("k8s", K8S).warnings
        assert any("keras-team/keras#20585" in w and "TF_USE_LEGACY_KERAS=1" in w for w in warnings)


K8S_ON = {**K8S, "DISTRIBUTED": "k8s", "DIST_STARTUP_TIMEOUT": "600"}


class TestCommands:
    def test_show_lists_the_cluster_and_the_tf_config_built(self) -> None:
        result = run_module(["tfboot", "show", "--json"], K8S_ON, timeout=60)
        data = last_json(result.stdout)
        assert data["settings"]["DIST_TASKS"] == {"value": "2", "source": "env"}
        assert data["settings"]["DIST_PORT"] == {"value": None, "source": "default"}
        assert json.loads(data["cluster"]["tf_config"])["task"] == {"type": "worker", "index": 1}
        text = run_module(["tfboot", "show"], K8S_ON, timeout=60).stdout
        assert "cluster: worker 1 of 2 (k8s; TF_CONFIG built" in text
        assert 'TF_CONFIG: {"cluster":{"worker":["train-0.train:2222"' in text

    def test_check_fails_on_a_cluster_problem(self) -> None:
        result = run_module(["tfboot", "check"], {**K8S_ON, "DIST_HOSTS": "worker=a,b,c"})
        assert result.returncode == 1
        assert "lists 3 worker host(s), DIST_TASKS counts 2" in result.stderr

    def test_check_passes_the_multi_worker_overlay_outside_a_pod(self, tmp_path) -> None:
        """The overlay's values in an env file, as CI or an image build has them: no
        JOB_COMPLETION_INDEX, no srun. Each index of the type is checked (the first and the
        last), srun's layout is left to run time; a real problem still fails."""
        overlay = tmp_path / "multi-worker.env"
        overlay.write_text("DISTRIBUTED=k8s\nDIST_TASKS=4\nDIST_HOSTS=worker=w-{i}.svc\n"
                           "DIST_STARTUP_TIMEOUT=600\n")  # fmt: skip
        result = run_module(["tfboot", "check", "--env-file", str(overlay)], {}, timeout=60)
        assert result.returncode == 0, result.stderr
        later = "cluster: worker indexes 0 to 3 checked (JOB_COMPLETION_INDEX comes at run time)"
        assert later in result.stdout
        short = tmp_path / "short.env"
        short.write_text("DISTRIBUTED=k8s\nDIST_TASKS=4\nDIST_HOSTS=worker=a,b,c\n")
        failed = run_module(["tfboot", "check", "--env-file", str(short)], {}, timeout=60)
        assert failed.returncode == 1 and "lists 3 worker host(s), DIST_TASKS counts 4" in (
            failed.stderr
        )
        slurm = tmp_path / "slurm.env"
        slurm.write_text("DISTRIBUTED=slurm\nDIST_TASKS=chief=1,worker=3\nDIST_PORT=9000\n")
        found = run_module(["tfboot", "check", "--json", "--env-file", str(slurm)], {}, timeout=60)
        assert found.returncode == 0, found.stderr
        assert last_json(found.stdout)["cluster"] == (
            "srun's variables come at run time: checked as a step of 4 task(s) on one node"
        )

    def test_off_reads_no_dist_variable(self) -> None:
        result = run_module(["tfboot", "check", "--json"], {"DIST_TASKS": "bad"}, timeout=60)
        assert result.returncode == 0 and "DIST_TASKS" not in result.stdout

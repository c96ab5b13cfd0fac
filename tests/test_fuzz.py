"""Fuzzing: generated environments, .env files and manifests give ConfigError or findings only.

Every test takes ``TFBOOT_FUZZ_EXAMPLES`` examples (default 200, the sample CI runs every
time); the large runs recorded in docs/testing.md set it to 10000::

    TFBOOT_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest -p no:cacheprovider tests/test_fuzz.py
"""

from __future__ import annotations

import os
import string
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import tf_plan
from support import threads as pool
from tfboot import ConfigError, resolve
from tfboot.adapters.tensorflow import LAUNCH
from tfboot.cluster import NAMES as CLUSTER_NAMES
from tfboot.cluster.plan import plan_cluster
from tfboot.envfile import read_env_file
from tfboot.manifests import InputError, Report, check_paths, check_text
from tfboot.node.cgroup import CgroupError, cpu_quota
from tfboot.node.cpu import CpuBudget, cpu_budget
from tfboot.settings import ALL_NAMES, FILE_NAMES, MAX_CPU_THREADS, MAX_MEMORY_MB

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("TFBOOT_FUZZ_EXAMPLES", "200"))
fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

OTHER_NAMES = [
    "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0", "CUDA_DEVICE_MEMORY_LIMIT_01",
    "ALIYUN_COM_GPU_MEM_CONTAINER", "ALIYUN_COM_GPU_MEM_DEV", "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "TF_CONFIG",
    "JOB_COMPLETION_INDEX", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_STEP_NODELIST",
    "SLURM_STEP_TASKS_PER_NODE", "SLURMD_NODENAME", "NO_PROXY", "HTTPS_PROXY",
]  # fmt: skip
NAMES = sorted((ALL_NAMES | set(CLUSTER_NAMES)) - {"TFBOOT_ENV_FILE"}) + OTHER_NAMES
NEAR_VALID = [
    "auto", "host", "all", "none", "off", "k8s", "slurm", "true", "FALSE", "0", "1", "2", "64",
    "65", "1024", "1025", "1048576", "1048577", "-1", "2048,2048", "0,1", "1,1", "6144m", "6g",
    "1T", "max", "", " ", "mixed_float16", "warn", "raise", "debug", "chief", "worker", "ps",
    "evaluator", "w-[0-3]", "node[01-04,7]", "2(x3),1", "h:2222,h2:2222", "[::1]:2222",
    "99999999999999999999999", "9" * 5000, "0" * 5000 + "1", "1e3", "١٢", "\u00a0", "1,,2",
    '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}', "{", "[]",
]  # fmt: skip
values = st.one_of(
    st.sampled_from(NEAR_VALID),
    st.text(max_size=20),
    st.integers(-(10**30), 10**30).map(str),
    st.lists(st.integers(0, 70000).map(str), max_size=6).map(",".join),
)
# Valid starting points, so that generated changes reach the plan and the TF_CONFIG builder.
BASES = [
    {},
    {"MEMORY_LIMIT_MB": "6144", "VIRTUAL_SPLIT": "2", "MEMORY_GROWTH": "true"},
    {"DISTRIBUTED": "k8s", "DIST_TASKS": "2", "DIST_HOSTS": "w-{i}.svc",
     "JOB_COMPLETION_INDEX": "1"},
    {"DISTRIBUTED": "slurm", "SLURM_PROCID": "1", "SLURM_STEP_NODELIST": "n[1-2]",
     "SLURM_STEP_TASKS_PER_NODE": "1(x2)", "SLURMD_NODENAME": "n2"},
    {"DISTRIBUTED": "auto",
     "TF_CONFIG": '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", '
                  '"index": 0}}'},
]  # fmt: skip
environments = st.one_of(
    st.dictionaries(st.sampled_from(NAMES), values, max_size=10),
    st.builds(
        lambda base, changes: {**base, **changes},
        st.sampled_from(BASES),
        st.dictionaries(st.sampled_from(NAMES), values, max_size=3),
    ),
)
budgets = st.builds(
    CpuBudget,
    st.integers(1, 512),
    st.one_of(st.none(), st.floats(0.01, 10000, allow_nan=False)),
    st.just("cpu.max"),
)


def assert_clean(exc: ConfigError) -> None:
    """A ConfigError names what is wrong, and quotes no value longer than it shows."""
    assert exc.problems
    for problem in exc.problems:
        assert problem.accepted
    assert len(str(exc)) < 2000 * len(exc.problems)


@fuzz
@given(environments, st.integers(0, 8), budgets)
def test_environments_through_settings_plan_and_tf_config(
    env: dict[str, str], gpus: int, cpu: CpuBudget
) -> None:
    env = {k: v for k, v in env.items() if "\x00" not in v}
    try:
        plan = tf_plan(env, gpus, cpu, settings=(resolved := resolve(env)))
        if resolved.distributed != "off":
            assert resolved.cluster is not None
            replicas = plan.local_replicas()
            cluster = plan_cluster(LAUNCH, "TensorFlow", resolved.distributed, resolved.cluster,
                                   env, {"replicas": replicas})  # fmt: skip
            built = cluster.environ.get("TF_CONFIG")
            assert built is None or built.startswith("{")
    except ConfigError as exc:
        assert_clean(exc)
        return
    assert all(0 < mb <= MAX_MEMORY_MB for sizes in plan.logical_mb.values() for mb in sizes)
    for threads in (pool(plan), pool(plan, "inter")):
        assert threads is None or 0 < threads <= max(MAX_CPU_THREADS, cpu.affinity)


SECRET = "§s3cret§"  # never a plausible key, so it may appear in no message
keys = st.one_of(
    st.sampled_from(sorted(FILE_NAMES)),
    st.from_regex(r"[A-Za-z_][A-Z0-9_]{0,8}", fullmatch=True),
    st.text(max_size=8),
)
lines = st.one_of(
    st.builds(lambda k, v: f"{k}={v}{SECRET}", keys, values),
    st.builds(lambda k, v: f"{k}={v}${{PLANTED}}", keys, values),  # interpolates the secret
    st.builds(lambda k: f"{k}=${{PLANTED:-x}}", keys),
    st.builds(lambda t: f"ghp_{SECRET}{t}", st.text(alphabet=string.ascii_letters, max_size=30)),
    st.builds(lambda k, v: f"export {k}='{SECRET}{v}'", keys, values),
    st.builds(lambda k: f'{k}="{SECRET}', keys),
    st.builds(lambda t: f"{SECRET}{t}", st.text(max_size=30)),
    st.sampled_from(["", "# comment", "   ", "=", "==", "KEY", f"{SECRET}:$6$hash:1:::"]),
)
files = st.one_of(
    st.lists(lines, max_size=12).map(lambda ls: "\n".join(ls).encode()),
    st.binary(max_size=200).map(lambda b: SECRET.encode() + b),
    st.builds(  # valid lines around bytes that are not UTF-8
        lambda head, junk: f"VIRTUAL_SPLIT=2\n{head}\n".encode() + junk + SECRET.encode(),
        st.sampled_from(["", "DISTRIBUTED=k8s", f"{SECRET}"]),
        st.binary(min_size=1, max_size=20).map(lambda b: b"\xff" + b),
    ),
)


@fuzz
@given(files)
def test_env_files_never_leak_and_raise_only_config_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.env"
    path.write_bytes(data)
    try:
        read_env_file(str(path), FILE_NAMES, {"PLANTED": SECRET})
    except ConfigError as exc:
        assert_clean(exc)
        assert "s3cret" not in str(exc)


@fuzz
@given(files, st.sampled_from(BASES))
def test_env_files_through_the_settings_never_quote_the_file(
    tmp_path: Path, data: bytes, base: dict[str, str]
) -> None:
    """The same files, resolved with a valid base: the values the file sets are parsed, and a
    bad one is named by its line, never quoted (nor what ${PLANTED} expanded to)."""
    path = tmp_path / "fuzz.env"
    path.write_bytes(data)
    env = {"TFBOOT_ENV_FILE": str(path), "PLANTED": SECRET}
    env.update({k: v for k, v in base.items() if k not in FILE_NAMES})
    try:
        settings = resolve(env)
        if settings.cluster is not None:
            plan_cluster(LAUNCH, "TensorFlow", settings.distributed, settings.cluster, env, {})
    except ConfigError as exc:
        assert_clean(exc)
        assert "s3cret" not in str(exc)


def cgroup_tree(root: Path, files: dict[str, bytes]) -> str:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return str(root)


CGROUP_FILES = [
    "proc/self/cgroup", "proc/self/mountinfo", "sys/fs/cgroup/cpu.max",
    "sys/fs/cgroup/cpu/cpu.cfs_quota_us", "sys/fs/cgroup/cpu/cpu.cfs_period_us",
]  # fmt: skip
cgroup_lines = st.one_of(
    st.sampled_from([
        b"0::/", b"0::/kubepods/pod\xc3\xa9", b"4:cpu,cpuacct:/", b"x:y:z", b"0::",
        b"30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw",
        b"35 25 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu,cpuacct",
        b"41 22 0:50 / /tmp/donn\xc3\xa9es rw - tmpfs none rw", b"42 22 0:51 / /a\\040b rw - x",
        b"150000 100000", b"max 100000", b"-1", b"100000", b"0 0", b"\xff\xfe 1",
    ]),
    st.binary(max_size=60),
)  # fmt: skip
cgroup_contents = st.one_of(
    st.lists(cgroup_lines, max_size=5).map(b"\n".join), st.binary(max_size=300)
)


@fuzz
@given(st.dictionaries(st.sampled_from(CGROUP_FILES), cgroup_contents))
def test_cgroup_files_of_any_bytes_give_a_quota_or_a_cgroup_error(
    tmp_path_factory: pytest.TempPathFactory, files: dict[str, bytes]
) -> None:
    root = cgroup_tree(tmp_path_factory.mktemp("cgroup"), files)
    try:
        quota = cpu_quota(root)
    except CgroupError as exc:
        text = str(exc)
        assert text.startswith("/") and ":" in text
        text.encode("utf-8")  # printable: no lone surrogates
        return
    assert quota is None or (quota.cpus > 0 and quota.source.startswith("/"))
    assert cpu_budget({"TFBOOT_CGROUP_ROOT": root}).affinity >= 1


@fuzz
@given(st.binary(max_size=400))
def test_manifest_files_of_any_bytes_give_findings_or_an_input_error(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("manifest") / "fuzz.yaml"
    path.write_bytes(data)
    try:
        report = check_paths([str(path)])
    except InputError as exc:
        assert str(exc).startswith("cannot read")
        return
    assert all(finding.rule and finding.message for finding in report.findings)


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(allow_nan=True),
    st.text(max_size=12), st.sampled_from(["1", "2", "1E", "500m", "16Gi", "8192", "1e18", "-1"]),
)  # fmt: skip
env_entries = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(NAMES), st.text(max_size=6))},
    optional={
        "value": st.one_of(st.sampled_from(NEAR_VALID), scalars),
        "valueFrom": st.one_of(scalars, st.fixed_dictionaries({"configMapKeyRef": scalars})),
    },
)
resource_keys = st.sampled_from(
    ["nvidia.com/gpu", "nvidia.com/gpumem", "aliyun.com/gpu-mem", "amd.com/gpu", "cpu", "memory",
     "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.40gb"]
)  # fmt: skip
containers_ = st.fixed_dictionaries(
    {"name": st.text(max_size=4)},
    optional={
        "image": st.one_of(st.sampled_from(["a:1", "a@sha256:00", "a"]), scalars),
        "env": st.one_of(st.lists(env_entries, max_size=4), scalars),
        "envFrom": st.one_of(st.lists(st.dictionaries(st.text(max_size=3), scalars)), scalars),
        "resources": st.one_of(
            st.fixed_dictionaries(
                {}, optional={"limits": st.dictionaries(resource_keys, scalars, max_size=4)}
            ),
            scalars,
        ),
        "securityContext": st.one_of(st.dictionaries(st.text(max_size=8), scalars), scalars),
    },
)
pod_specs = st.fixed_dictionaries(
    {"containers": st.one_of(st.lists(containers_, max_size=3), scalars)},
    optional={"initContainers": st.lists(containers_, max_size=1)},
)
kinds = st.sampled_from(
    ["Pod", "Job", "CronJob", "Deployment", "StatefulSet", "PodTemplate", "JobSet", "TFJob",
     "ConfigMap", "List", "Service", "Unknown"]
)  # fmt: skip


def document(kind: str, spec: object, extra: dict) -> dict:
    template = {"spec": spec}
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": "x"},
        "data": extra,
        "template": template,
        "items": [{"kind": "Pod", "spec": spec}],
        "spec": {
            **extra,
            "containers": spec.get("containers") if isinstance(spec, dict) else spec,
            "template": template,
            "jobTemplate": {"spec": {"template": template}},
            "replicatedJobs": [{"name": "w", "replicas": extra.get("replicas"),
                                "template": {"spec": {"template": template}}}],
            "tfReplicaSpecs": {"Worker": {"replicas": extra.get("replicas"), "template": template}},
        },
    }  # fmt: skip


documents = st.builds(
    document,
    kinds,
    st.one_of(pod_specs, scalars),
    st.dictionaries(
        st.sampled_from(["replicas", "completions", "parallelism", "backoffLimit", "DIST_PORT"]),
        scalars,
    ),
)
manifests = st.one_of(
    st.lists(documents, max_size=3).map(lambda ds: yaml.safe_dump_all(ds)),
    st.text(alphabet=string.printable, max_size=200),
    st.recursive(scalars, lambda c: st.lists(c) | st.dictionaries(st.text(max_size=4), c)).map(
        lambda d: yaml.safe_dump(d)
    ),
)


@fuzz
@given(manifests)
def test_manifests_checker_gives_findings_only(text: str) -> None:
    report = Report()
    check_text("fuzz.yaml", text, report)
    for finding in report.findings:
        assert finding.rule and finding.message


# The seams' classes: a child's changed settings over a parent's writes, stand-in modules,
# homes and Keras configs of any shape, YAML aliases.
JAX_SETTINGS = st.dictionaries(
    st.sampled_from(["VIRTUAL_SPLIT", "MEMORY_GROWTH", "CPU_THREADS", "MEMORY_LIMIT_MB"]),
    st.sampled_from(["1", "2", "4", "true", "false", "3", "1024"]),
    max_size=4,
)


@fuzz
@given(JAX_SETTINGS, JAX_SETTINGS, st.integers(0, 2))
def test_a_child_never_takes_its_parents_writes_for_its_own(
    parent: dict[str, str], child: dict[str, str], gpus: int
) -> None:
    """What a parent's JAX plan wrote, recorded, is never a contradiction in a child with
    other settings: the child's own plan decides, or fails only on its own settings."""
    from tfboot.adapters.jax import plan_jax
    from tfboot.budget import NO_LIMIT, make_budget
    from tfboot.provenance import RECORD, with_write

    cpu = CpuBudget(8, None, "")
    try:
        budget = make_budget(resolve(parent, "jax"), parent, cpu=cpu, memory=NO_LIMIT)
        written = plan_jax(budget, (1 << 36,) * gpus).environ
    except ConfigError:
        return
    inherited = dict(parent)
    for name, value in written.items():
        inherited[RECORD] = with_write(inherited, name, value, "tfboot")
        inherited[name] = value
    env = {**{k: v for k, v in inherited.items() if k not in parent}, **child}
    try:
        budget = make_budget(resolve(env, "jax"), env, cpu=cpu, memory=NO_LIMIT)
        plan_jax(budget, (1 << 36,) * gpus)
    except ConfigError as exc:
        assert not any("contradicts" in p.accepted for p in exc.problems), str(exc)


@fuzz
@given(st.sets(st.sampled_from([
    "config", "config.list_physical_devices", "config.set_visible_devices",
    "config.set_logical_device_configuration", "config.LogicalDeviceConfiguration",
    "config.threading", "config.threading.set_intra_op_parallelism_threads",
    "config.threading.set_inter_op_parallelism_threads", "config.experimental",
    "config.experimental.set_memory_growth",
])), environments)  # fmt: skip
def test_a_stand_in_module_is_checked_before_anything_is_done(
    attributes: set[str], env: dict[str, str]
) -> None:
    """A module with any subset of TensorFlow's attributes: the plan is either fully there
    or refused as not the framework, before any call or variable."""
    import types

    from support import tf_plan
    from tfboot.executor import NotTheFramework, Reader

    module = types.ModuleType("tensorflow")
    for path in sorted(attributes, key=len):
        node: Any = module
        *parents, leaf = path.split(".")
        for name in parents:
            if not hasattr(node, name):
                setattr(node, name, types.SimpleNamespace())
            node = getattr(node, name)
        if not hasattr(node, leaf):
            namespace = leaf in ("config", "threading", "experimental")
            setattr(node, leaf, types.SimpleNamespace() if namespace else lambda *a, **k: [])
    try:
        plan = tf_plan({k: v for k, v in env.items() if "\x00" not in v}, 2)
    except ConfigError:
        return
    try:
        Reader(module).check(plan)
    except NotTheFramework as exc:
        assert str(exc).startswith("tensorflow.")


@fuzz
@given(
    st.one_of(st.none(), st.text(max_size=30)),
    st.one_of(st.none(), st.binary(max_size=200), st.sampled_from(
        [b'{"backend": "jax"}', b'{"backend": 3}', b"[]", b'{"backend": null}', b"\xff"])),
)  # fmt: skip
def test_any_keras_home_and_config_give_a_backend(home: str | None, config: bytes | None) -> None:
    import tempfile

    from tfboot.node.kerasconfig import keras_backend

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / ".keras").mkdir()
        if config is not None:
            (Path(folder) / ".keras" / "keras.json").write_bytes(config)
        env = {"HOME": folder}
        if home is not None and "\x00" not in home:
            env["KERAS_HOME"] = home
        assert isinstance(keras_backend(env, {}), str)


@fuzz
@given(st.integers(1, 60), st.integers(1, 60), st.integers(0, 4))
def test_aliased_yaml_is_bounded_by_work(width: int, depth: int, extra: int) -> None:
    """Anchors nested ``depth`` deep, each aliased ``width`` times: read, or refused as
    excessive aliasing, never expanded."""
    lines = ["a0: &a0 {name: c, image: i}"]
    for level in range(1, depth + 1):
        aliases = ", ".join([f"*a{level - 1}"] * width)
        lines.append(f"a{level}: &a{level} [{aliases}]")
    lines.append(f"kind: Pod\napiVersion: v1\nmetadata: {{name: p{extra}}}")
    lines.append(f"spec: {{containers: *a{min(depth, 1)}}}")
    report = Report()
    check_text("aliases.yaml", "\n".join(lines) + "\n", report)
    assert all(f.rule != "unreadable" or "aliasing" in f.message for f in report.findings)

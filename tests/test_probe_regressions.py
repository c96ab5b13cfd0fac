"""Regressions for the defects an outside probe of the release found, one test or more each.

Each test failed before its fix. The manifest cases are in ``k8s/test_probe_manifests.py``,
the peer watcher's in ``cluster/test_watcher.py``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support import cluster_plan, problem_text, run_module, run_python, unavailable
from tfboot import resolve
from tfboot.cli import main
from tfboot.errors import ConfigError
from tfboot.node.cgroup import CgroupError, cpu_quota

TREES = Path(__file__).parent / "testdata" / "cgroup"
TOKEN = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"


# 1. A mount path that is not ASCII crashed `import tensorflow` with nothing set.


@pytest.mark.parametrize(
    ("case", "cpus", "source"),
    [
        ("v2-non-ascii", 2.5, "/sys/fs/cgroup/kubepods/pod é/cpu.max"),
        ("v1-escaped-mount", 0.5, "/sys/fs/cgroup/cpu acct/job/cpu.cfs_quota_us"),
    ],
)
def test_kernel_files_with_any_bytes_are_read(case: str, cpus: float, source: str) -> None:
    quota = cpu_quota(str(TREES / case))
    assert quota is not None and (quota.cpus, quota.source) == (cpus, source)


def test_a_cgroup_file_of_bytes_is_named_never_quoted() -> None:
    with pytest.raises(CgroupError) as info:
        cpu_quota(str(TREES / "v2-undecodable"))
    assert "/sys/fs/cgroup/cpu.max" in str(info.value) and "\\x" not in str(info.value)


def _unshare(command: str) -> str:
    """A shell line in a mount namespace with a non-ASCII tmpfs mount (needs root)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        unavailable("needs root and unshare(1) for a private mount namespace")
        pytest.skip("needs root and unshare(1) for a private mount namespace")
    mount = "mkdir -p /tmp/données && mount -t tmpfs none /tmp/données"
    return f"unshare -m sh -c '{mount} && {command}'"


def _run_unshared(arguments: str) -> str:
    """This Python with ``arguments`` in that namespace; its stdout, after checking it ran."""
    code = f"""
import subprocess, sys
line = {_unshare("$0 " + arguments)!r}.replace("$0", sys.executable)
sys.exit(subprocess.run(line, shell=True).returncode)
"""
    result = run_python(code, timeout=300)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    return result.stdout


def test_a_real_non_ascii_mount_reads_as_no_quota_and_show_runs() -> None:
    assert '"problem": null' in _run_unshared("-m tfboot show --json")


@pytest.mark.tf
def test_a_real_non_ascii_mount_does_not_break_import_tensorflow() -> None:
    _run_unshared('-c "import tensorflow"')


# 2. Env-file errors printed the file's content.


def test_a_line_without_equals_is_named_by_number_only(tmp_path: Path) -> None:
    path = tmp_path / "tfboot.env"
    path.write_text(f"VIRTUAL_SPLIT=2\n{TOKEN}\nAKIAIOSFODNN7EXAMPLE\n")
    text = problem_text({"TFBOOT_ENV_FILE": str(path)})
    assert "lines 2, 3 are not KEY=VALUE" in text
    assert TOKEN not in text and "AKIA" not in text


def test_an_interpolated_secret_is_never_quoted(tmp_path: Path) -> None:
    path = tmp_path / "tfboot.env"
    path.write_text("VIRTUAL_SPLIT=2\nMEMORY_LIMIT_MB=${API_TOKEN}\n")
    text = problem_text({"TFBOOT_ENV_FILE": str(path), "API_TOKEN": TOKEN})
    assert "MEMORY_LIMIT_MB: the value on line 2 of" in text and "interpolation" in text
    assert TOKEN not in text


def test_interpolation_reads_only_the_mapping_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tfboot.env"
    path.write_text("MEMORY_LIMIT_MB=${CAP}\n")
    monkeypatch.setenv("CAP", "999")
    settings = resolve({"TFBOOT_ENV_FILE": str(path), "CAP": "2048"})
    assert settings.memory_limit_mb == 2048
    # ${CAP} unset in the mapping: empty, and an empty value counts as unset
    assert resolve({"TFBOOT_ENV_FILE": str(path)}).memory_limit_mb is None


# 3. tfboot.apply(), as the README shows it, configured twice.


@pytest.mark.tf
def test_explicit_apply_configures_once() -> None:
    result = run_python("import tfboot; tfboot.apply()", {"VIRTUAL_SPLIT": "2"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.count("tfboot: configured TensorFlow") == 1, result.stderr


# 7. Large clusters built a TF_CONFIG no later subprocess could start with.


def _k8s(tasks: int) -> dict[str, str]:
    return {
        "DIST_TASKS": str(tasks),
        "DIST_HOSTS": "worker=train-{i}.train.default.svc.cluster.local",
        "JOB_COMPLETION_INDEX": "0",
    }


def test_a_tf_config_too_large_for_one_environment_string_is_refused() -> None:
    from tfboot.cluster.tfjob import MAX_TF_CONFIG_BYTES

    with pytest.raises(ConfigError) as info:
        cluster_plan("k8s", _k8s(3000))
    text = str(info.value)
    assert "DIST_TASKS='3000' cannot be met" in text and f"{MAX_TF_CONFIG_BYTES}" in text
    tf_config = cluster_plan("k8s", _k8s(1500)).environ.get("TF_CONFIG")
    assert tf_config is not None and len(tf_config) <= MAX_TF_CONFIG_BYTES


# 8. Unclear DIST_* errors.


@pytest.mark.parametrize("hosts", ["worker=a,", "worker=a:b", "worker=a,,b", "worker=a b"])
def test_host_errors_never_show_a_placeholder_port(hosts: str) -> None:
    text = problem_text({"DISTRIBUTED": "k8s", "DIST_HOSTS": hosts})
    assert ":1'" not in text and "DIST_HOSTS=" in text


def test_a_port_template_is_a_port() -> None:
    env = {"DIST_TASKS": "2", "DIST_HOSTS": "worker=localhost:222{i}", "JOB_COMPLETION_INDEX": "1"}
    assert '"localhost:2220","localhost:2221"' in (
        cluster_plan("k8s", env).environ.get("TF_CONFIG") or ""
    )


def test_a_slurm_port_past_65535_names_dist_port() -> None:
    env = {
        "SLURM_PROCID": "0",
        "SLURM_STEP_NODELIST": "n[1-2]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "DIST_PORT": "65535",
    }
    with pytest.raises(ConfigError) as info:
        cluster_plan("slurm", env)
    assert len(info.value.problems) == 1
    assert "DIST_PORT='65535' cannot be met on this step" in str(info.value)
    assert "expected a port from 1 to 65534" in str(info.value)


def test_a_zero_count_says_why() -> None:
    text = problem_text({"DISTRIBUTED": "k8s", "DIST_TASKS": "chief=0,worker=3"})
    assert "a count must be at least 1: leave chief out of DIST_TASKS" in text


def test_one_address_written_twice_is_refused() -> None:
    env = {"DIST_TASKS": "2", "DIST_HOSTS": "worker=a:2222,A:02222", "JOB_COMPLETION_INDEX": "0"}
    with pytest.raises(ConfigError, match="is used by both worker:0 and worker:1"):
        cluster_plan("k8s", env)


# 9. An empty TF_FORCE_GPU_ALLOW_GROWTH counted as a contradiction.


def test_an_empty_allow_growth_is_unset() -> None:
    env = {"MEMORY_GROWTH": "yes", "TF_FORCE_GPU_ALLOW_GROWTH": ""}
    assert resolve(env).memory_growth is True


def test_a_contradiction_quotes_the_value_as_written() -> None:
    text = problem_text({"MEMORY_GROWTH": "yes", "TF_FORCE_GPU_ALLOW_GROWTH": "false"})
    assert (
        "MEMORY_GROWTH='yes' is invalid: it contradicts TF_FORCE_GPU_ALLOW_GROWTH='false'" in text
    )


# Low.


@pytest.mark.parametrize("value", ["1_0", "١٢", "0", "9999999", "1.5", "nan"])
def test_the_startup_timeout_is_a_bounded_whole_number(value: str) -> None:
    text = problem_text({"DISTRIBUTED": "k8s", "DIST_STARTUP_TIMEOUT": value})
    assert f"DIST_STARTUP_TIMEOUT={value!r} is invalid: expected a number of seconds " in text
    assert "from 1 to 604800" in text


def test_a_huge_rank_is_quoted_as_given() -> None:
    huge = "99999999999999999999999"
    env = {"SLURM_PROCID": huge, "SLURM_STEP_NODELIST": "n1", "SLURM_STEP_TASKS_PER_NODE": "1"}
    with pytest.raises(ConfigError, match=f"SLURM_PROCID='{huge}'"):
        cluster_plan("slurm", env)


def test_check_refuses_an_empty_env_file_path(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["check", "--env-file", ""])
    assert info.value.code == 2
    assert "give the path of a .env file" in capsys.readouterr().err


@pytest.mark.tf
def test_doctor_json_on_error_has_every_key() -> None:
    result = run_module(["tfboot", "doctor", "--json"], {"VIRTUAL_SPLIT": "abc"}, timeout=300)
    assert result.returncode == 1
    from support import last_json

    report = last_json(result.stdout)
    assert {"settings", "decisions", "cluster", "error", "calls"} <= set(report)
    assert "VIRTUAL_SPLIT='abc'" in report["error"]


def test_an_empty_tf_config_is_a_single_node() -> None:
    line = cluster_plan("auto", {"TF_CONFIG": "{}"}).line()
    assert line == "cluster: single node (TF_CONFIG names no cluster); nothing set"

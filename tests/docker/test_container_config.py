"""The tfboot image configures TensorFlow from `docker run` flags alone.

Every test starts fresh containers of the image built from ``docker/Dockerfile`` on a
Debian-based stand-in for the TensorFlow image, with nothing but ``-e`` variables, CPU
limits and a read-only mount, and checks what TensorFlow really did inside. Each runs on
every Python that has TensorFlow: 3.11 (TF 2.21), 3.13 (TF 2.21) and 3.14 (TF 2.22.0rc0).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from container_runs import DOCTOR_CMD, PROBE_CMD, cpus, run_container

pytestmark = pytest.mark.docker


def test_image_runs_as_non_root_with_oci_labels(tf_image: str) -> None:
    info = json.loads(
        subprocess.run(
            ["docker", "image", "inspect", tf_image],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )[0]
    config = info["Config"]
    assert config["User"] not in ("", "0", "root", "0:0")
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "tfboot"
    assert labels["org.opencontainers.image.base.name"].startswith("tfboot-test/")
    assert labels["org.opencontainers.image.licenses"]


def test_virtual_split_gives_two_logical_cpus(tf_image: str) -> None:
    report = run_container(tf_image, DOCTOR_CMD, {"VIRTUAL_SPLIT": "2"}).ok().json()
    assert len(report["logical_devices"]["CPU"]) == 2, report
    assert report["settings"]["VIRTUAL_SPLIT"] == {"value": "2", "source": "env"}


@pytest.mark.parametrize(
    ("limit", "env", "expected"),
    [
        pytest.param(1, {}, 1, id="cpus1-auto"),
        pytest.param(0.5, {}, 1, id="cpus0.5-auto-rounds-up"),
        pytest.param(1, {"CPU_THREADS": "host"}, "affinity", id="cpus1-host"),
        pytest.param(1, {"TF_NUM_INTRAOP_THREADS": "2"}, 2, id="tf-env-beats-auto"),
        pytest.param(
            1, {"CPU_THREADS": "host", "TF_NUM_INTRAOP_THREADS": "1"}, 1, id="tf-env-beats-host"
        ),
        pytest.param(None, {"CPU_THREADS": "3"}, 3, id="no-quota-int"),
    ],
)
def test_intra_op_pool_follows_cpu_quota(
    tf_image: str, limit: float | None, env: dict[str, str], expected: int | str
) -> None:
    """The intra-op pool TensorFlow actually creates, counted from the process's threads."""
    resources = cpus(limit) if limit is not None else {}
    probe = run_container(tf_image, PROBE_CMD, env, **resources).ok().json()
    if expected == "affinity":
        if probe["affinity"] < 2:
            pytest.skip("needs at least two schedulable CPUs to tell `host` from the quota")
        expected = probe["affinity"]
    assert probe["intra_pool"] == expected, probe


def test_doctor_reports_the_quota_and_the_threads_it_set(tf_image: str) -> None:
    report = run_container(tf_image, DOCTOR_CMD, **cpus(1)).ok().json()
    probe = run_container(tf_image, PROBE_CMD, **cpus(1)).ok().json()
    assert report["cpu"]["quota"] == pytest.approx(1.0), report["cpu"]
    assert report["threads"]["intra_op"] == 1, report["threads"]
    assert report["threads"]["inter_op"] == probe["inter_pool"], (report["threads"], probe)


def test_invalid_value_fails_tensorflow_import_only(tf_image: str) -> None:
    bad = {"MEMORY_LIMIT_MB": "abc"}
    tf_import = run_container(tf_image, ["python3", "-c", "import tensorflow"], bad)
    assert tf_import.exit_code != 0, tf_import
    assert "MEMORY_LIMIT_MB" in tf_import.stderr, tf_import
    assert "ConfigError" in tf_import.stderr, tf_import
    for command in (["pip", "--version"], ["python3", "-c", "pass"]):
        other = run_container(tf_image, command, bad)
        assert other.exit_code == 0, (command, other)
        assert other.stderr == "", (command, other)


def test_env_file_is_applied_and_env_wins(tf_image: str, tmp_path: Path) -> None:
    env_file = tmp_path / "tfboot.env"
    env_file.write_text("# mounted config\nVIRTUAL_SPLIT=3\nCPU_THREADS=1\n")
    env_file.chmod(0o644)
    mount = [(env_file, "/config/tfboot.env")]
    from_file = {"TFBOOT_ENV_FILE": "/config/tfboot.env"}

    report = run_container(tf_image, DOCTOR_CMD, from_file, mounts=mount).ok().json()
    assert len(report["logical_devices"]["CPU"]) == 3, report
    assert report["threads"]["intra_op"] == 1, report["threads"]
    assert report["settings"]["VIRTUAL_SPLIT"]["source"] == "file /config/tfboot.env"

    overridden = {**from_file, "VIRTUAL_SPLIT": "2"}
    report = run_container(tf_image, DOCTOR_CMD, overridden, mounts=mount).ok().json()
    assert len(report["logical_devices"]["CPU"]) == 2, report
    assert report["settings"]["VIRTUAL_SPLIT"]["source"] == "env"
    assert report["settings"]["CPU_THREADS"]["source"] == "file /config/tfboot.env"
    assert report["threads"]["intra_op"] == 1, report["threads"]


def test_isolated_mode_as_non_root_is_still_configured(tf_image: str) -> None:
    """``python -I`` skips user site and PYTHON* variables, not the site-packages .pth."""
    isolated = ["python3", "-I", *PROBE_CMD[1:]]
    probe = run_container(tf_image, isolated, {"VIRTUAL_SPLIT": "2"}).ok().json()
    assert probe["uid"] != 0, probe
    assert probe["logical_cpus"] == 2, probe
    assert probe["tfboot_loaded"], probe
    # Debian's own sitecustomize shadows any in site-packages: the .pth must not need one.
    assert (probe["sitecustomize"] or "").startswith("/usr/lib/python3"), probe

"""The parts of ``tfboot selftest`` that need no TensorFlow: its reading of TensorFlow's log,
the environment its rows get, and its options.

The pluggable lines are copied from runs on the simulated GPU (TensorFlow 2.21 and the
pinned nightly). No CUDA GPU is reachable here, so the CUDA line is written from the
format string in TensorFlow's ``gpu_device.cc`` (``Created device ... MB memory: ->``
plus ``GetShortDeviceDescription``): a stand-in, named as such.
"""

from __future__ import annotations

import pytest
from tfboot.cli import main
from tfboot.selftest.runner import child_env
from tfboot.selftest.tflog import parse

PLUGGABLE_221 = (
    "I0000 00:00:1.2 25070 pluggable_device_factory.cc:271] Created TensorFlow device "
    "(/job:localhost/replica:0/task:0/device:GPU:0 with 1748 MB memory) -> physical "
    "PluggableDevice (device: 1, name: SIMGPU, pci bus id: <undefined>)"
)
PLUGGABLE_NIGHTLY = (
    "I0000 00:00:1.4 25627 pluggable_device_factory.cc:381] Created TensorFlow device "
    "(/job:localhost/replica:0/task:0/device:GPU:1 with 512 MB memory and priority: DEFAULT) "
    "-> physical PluggableDevice (device: 0, name: SimGPU, pci bus id: 0000:00:01.0)"
)
CUDA_STAND_IN = (
    "I0000 00:00:1.5 31 gpu_device.cc:2020] Created device "
    "/job:localhost/replica:0/task:0/device:GPU:0 with 1024 MB memory:  -> device: 3, "
    "name: NVIDIA H100 80GB HBM3, pci bus id: 0000:19:00.0, compute capability: 9.0"
)
REGIONS = """\
I0000 bfc_allocator.cc:176] Extending allocation by 2.00MiB bytes for pluggable_device_host_bfc.
I0000 bfc_allocator.cc:176] Extending allocation by 2.00MiB bytes for PluggableDevice_0_bfc.
I0000 bfc_allocator.cc:223] Extending allocation by 1.71GiB bytes for GPU_1_bfc.
I0000 bfc_allocator.cc:176] Extending allocation by 4.00MiB bytes for PluggableDevice_0_bfc.
tfboot: warning: TF_GPU_ALLOCATOR=cuda_malloc_async: memory_limit is then a release threshold
"""


def test_device_lines_of_both_factories() -> None:
    log = parse("\n".join([PLUGGABLE_221, PLUGGABLE_NIGHTLY, CUDA_STAND_IN]))
    assert [(d.logical, d.memory_mb, d.physical, d.model) for d in log.devices] == [
        (0, 1748, 1, "SIMGPU"),
        (1, 512, 0, "SimGPU"),
        (0, 1024, 3, "NVIDIA H100 80GB HBM3"),
    ]


def test_regions_per_logical_gpu_and_warnings() -> None:
    log = parse(REGIONS)
    assert log.region_mib(0) == [2, 4]  # the host allocator is not a GPU's
    assert log.region_mib(1) == [round(1.71 * 1024, 2)]
    assert log.tfboot_warnings == [
        "TF_GPU_ALLOCATOR=cuda_malloc_async: memory_limit is then a release threshold"
    ]


def test_child_env_keeps_the_node_and_replaces_tfboot_settings() -> None:
    base = {
        "PATH": "/usr/bin",
        "CUDA_VISIBLE_DEVICES": "2,3",
        "MEMORY_LIMIT_MB": "6144",
        "TFBOOT_DISABLE": "true",
        "TF_FORCE_GPU_ALLOW_GROWTH": "false",
        "TF_GPU_ALLOCATOR": "cuda_malloc_async",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    env = child_env({"VISIBLE_GPU": "1"}, base)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["PATH"] == "/usr/bin"
    assert env["VISIBLE_GPU"] == "1" and env["TFBOOT_LOG"] == "info"
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "0"
    for dropped in ("MEMORY_LIMIT_MB", "TFBOOT_DISABLE", "TF_FORCE_GPU_ALLOW_GROWTH",
                    "TF_GPU_ALLOCATOR"):  # fmt: skip
        assert dropped not in env


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpu", "none"], "tests nothing"),
        (["--gpu", "1,1"], "listed more than once"),
        (["--gpu", "x"], "expected all, none, a GPU index"),
        (["--cap-mb", "10"], "expected a number of MiB from 64 to 1048576"),
        (["--cap-mb", "9" * 5000], "(5000 characters): expected a number of MiB from 64"),
        (["--timeout", "0"], "expected a number of seconds from 1 to 86400"),
        (["--timeout", "1" + "0" * 20], "expected a number of seconds from 1 to 86400"),
        (["--only", "memory_limit,caps"], "'caps' is not a row; the rows are visible_gpu,"),
    ],
)
def test_bad_options_exit_2_with_a_reason(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["selftest", *args])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_header_names_shm_memlock_and_the_mig_slices_seen() -> None:
    from tfboot.selftest.render import header
    from tfboot.selftest.runner import Report

    report = Report("2.21.0", [{"name": "GPU:0"}], [0], 1024)
    report.nccl = {"needed": None, "shm_mib": 64, "memlock_mib": "unlimited", "warnings": []}
    report.mig = ["MIG-aaaa", "MIG-bbbb"]
    text = header(report)
    assert "NCCL: /dev/shm 64 MiB, memlock unlimited (one GPU: NCCL not needed)" in text
    assert "MIG: 2 instance(s) visible (MIG-aaaa, MIG-bbbb)" in text
    assert "run one process per slice" in text


def test_the_xla_row_skips_on_a_build_that_is_not_cudas() -> None:
    from tfboot.selftest.rows import ROWS, Context

    (row,) = [r for r in ROWS if r.name == "xla_jit"]
    assert row.skip(Context(0, 1, 1024, cuda=True)) is None
    assert "not a CUDA build" in (row.skip(Context(0, 1, 1024, cuda=False)) or "")
    verdict = row.judge(Context(0, 1, 1024), {"jit_value": 3072.0, "xla_flags": None}, None)
    assert verdict.status == "PASS"

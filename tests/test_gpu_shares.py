"""What GPU nodes hand a container: MPS memory limits and MIG slices (pure; no TensorFlow).

``MEMORY_LIMIT_MB=auto`` under MPS (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``), and the rule
between the share sources: the hard shares (HAMi, MPS) first, the smaller per GPU when
both are set; gpushare's advisory share only when neither is. Several MIG instances in
one process: a warning, an error under ``REQUIRE_GPU``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support import problem_text
from tfboot import ConfigError, resolve
from tfboot.adapters.jax import _gpus as jax_gpus
from tfboot.adapters.jax import fraction_text
from tfboot.node.deviceplugin import partition_total

MPS = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"


def caps(env: dict[str, str]) -> tuple[int | None, dict[int, int], str]:
    settings = resolve({"MEMORY_LIMIT_MB": "auto", **env})
    return (
        settings.memory_limit_mb,
        settings.memory_limit_per_gpu,
        settings.source("MEMORY_LIMIT_MB"),
    )


@pytest.mark.parametrize(
    ("value", "default", "per_gpu"),
    [
        ("4G", 2560, {}),
        ("4096M", 2560, {}),
        ("4096", 2560, {}),
        ("4gb", 2560, {}),
        # Two GPUs: NCCL's 1024 MiB beside TensorFlow's 1536.
        ("0=8G,1=6144M", None, {0: 8192 - 2560, 1: 6144 - 2560}),
        (" 0=4096M , 2=1T ", None, {0: 4096 - 2560, 2: (1 << 20) - 2560}),
    ],
)
def test_documented_forms_minus_the_headroom(
    value: str, default: int | None, per_gpu: dict[int, int]
) -> None:
    limit, found, source = caps({MPS: value})
    assert (limit, found) == (default, per_gpu)
    room = 1536 if default else 2560
    assert source.startswith(
        f"MPS {MPS}={value.strip()} (enforced) minus {room} MiB of headroom for TensorFlow ("
    )


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("lots", "expected an amount from 1 MiB to 1 TiB"),
        ("0=4G,0=2G", "device 0 is given twice"),
        ("x=1G", "device=amount pairs such as 0=4G,1=2048M"),
        ("4G,2G", "device=amount pairs"),
        ("0=", "expected an amount from 1 MiB to 1 TiB"),
        ("\u0664G", "expected an amount"),
    ],
)
def test_malformed_values_name_the_variable(value: str, words: str) -> None:
    text = problem_text({"MEMORY_LIMIT_MB": "auto", MPS: value})
    assert f"{MPS}={value!r}" in text and words in text
    assert "none is set" not in text  # it is set: the problem is its value


PIPE = "CUDA_MPS_PIPE_DIRECTORY"


def test_auto_with_only_the_mps_pipe_says_the_limit_is_on_the_daemon() -> None:
    """NVIDIA's DRA driver and device plugin hand the container the pipe, not the limit."""
    text = problem_text({"MEMORY_LIMIT_MB": "auto", PIPE: "/tmp/nvidia-mps"})
    assert text.startswith("MEMORY_LIMIT_MB='auto' is invalid: ")
    assert f"MPS is there ({PIPE}='/tmp/nvidia-mps')" in text
    assert "its memory limit is not visible in the container" in text
    assert "NVIDIA's DRA driver and device plugin set it on the MPS control daemon" in text
    assert f"set {MPS} to the claim's defaultPinnedDeviceMemoryLimit (such as 10G)" in text
    assert "or set MEMORY_LIMIT_MB to that limit in MiB minus the framework's headroom" in text
    assert "minus the framework's headroom (`tfboot show` gives it)" in text


def test_auto_with_nothing_says_nothing_of_mps() -> None:
    for env in ({}, {PIPE: " "}):
        text = problem_text({"MEMORY_LIMIT_MB": "auto", **env})
        assert "none is set" in text and "MPS is there" not in text


def test_the_pipe_beside_a_limit_takes_the_limit() -> None:
    assert caps({MPS: "4G", PIPE: "/tmp/nvidia-mps"})[0] == 2560


def test_check_command_says_so_too(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from tfboot.cli import main

    monkeypatch.setenv("MEMORY_LIMIT_MB", "auto")
    monkeypatch.setenv(PIPE, "/tmp/nvidia-mps")
    for name in (
        MPS,
        "CUDA_DEVICE_MEMORY_LIMIT",
        "ALIYUN_COM_GPU_MEM_CONTAINER",
        "TFBOOT_ENV_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    assert main(["check"]) == 1
    out, err = capsys.readouterr()
    assert "its memory limit is not visible in the container" in out + err


def test_the_smaller_hard_share_holds_per_gpu() -> None:
    env = {"CUDA_DEVICE_MEMORY_LIMIT": "6000m", MPS: "0=4G,1=16G"}
    limit, per_gpu, source = caps(env)
    assert limit == 6000 - 2560 and per_gpu == {0: 4096 - 2560, 1: 6000 - 2560}
    assert source.startswith("HAMi ") and "MPS " in source and "the smaller per GPU" in source


def test_a_hard_share_wins_over_gpushare() -> None:
    limit, _, source = caps({MPS: "4G", "ALIYUN_COM_GPU_MEM_CONTAINER": "16"})
    assert limit == 2560 and source.startswith("MPS ")


def test_gpushare_alone_is_still_read() -> None:
    assert caps({"ALIYUN_COM_GPU_MEM_CONTAINER": "2"})[0] == 2048 - 1536


def test_mps_caps_only_the_gpus_it_names_after_visible_gpu() -> None:
    env = {"MEMORY_LIMIT_MB": "auto", MPS: "1=4G", "VISIBLE_GPU": "1"}
    plan = plan_with(env, 2)
    assert plan.logical_mb == {1: (4096 - 1536,)}


MIG_A = "MIG-4b3a1f52-6a5e-5e2b-9d0f-2f4e1c0b7a11"
MIG_B = "MIG-8d2c7e90-1b4f-5a6d-8c3e-7f1a2b3c4d55"


def plan_with(env: dict[str, str], gpus: int = 1):
    from support import tf_plan
    from tfboot.node.cpu import CpuBudget

    return tf_plan(env, gpus, CpuBudget(4, None, ""))


@pytest.mark.parametrize("variable", ["CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"])
def test_several_mig_slices_warn_that_one_process_uses_one(variable: str) -> None:
    (warning,) = plan_with({variable: f"{MIG_A},{MIG_B}"}).warnings
    assert f"2 MIG instances are visible ({MIG_A}, {MIG_B})" in warning
    assert "one process uses one MIG slice" in warning
    assert "CUDA_VISIBLE_DEVICES set to its own MIG UUID" in warning


def test_several_mig_slices_are_an_error_under_require_gpu() -> None:
    env = {"CUDA_VISIBLE_DEVICES": f"{MIG_A},{MIG_B}", "REQUIRE_GPU": "true"}
    with pytest.raises(ConfigError) as info:
        plan_with(env)
    assert "REQUIRE_GPU='true' cannot be applied on this host" in str(info.value)


def test_one_slice_is_a_gpu_like_any_other() -> None:
    env = {"CUDA_VISIBLE_DEVICES": MIG_A, "MEMORY_LIMIT_MB": "4096", "VIRTUAL_SPLIT": "2"}
    plan = plan_with(env)
    assert plan.warnings == [] and plan.logical_mb == {0: (2048, 2048)}


def test_cuda_visible_devices_decides_over_the_runtimes_list() -> None:
    env = {"CUDA_VISIBLE_DEVICES": MIG_A, "NVIDIA_VISIBLE_DEVICES": f"{MIG_A},{MIG_B}"}
    assert plan_with(env).warnings == []


@pytest.mark.parametrize(
    ("env", "cuda", "slices", "count"),
    [
        ({}, ["0", "1"], [], None),
        ({"CUDA_VISIBLE_DEVICES": ""}, [], [], None),  # CUDA lists nothing; else unset
        ({"CUDA_VISIBLE_DEVICES": "1, 7,0"}, ["1"], [], 3),  # CUDA stops at GPU 7 of 2
        ({"CUDA_VISIBLE_DEVICES": "0,,1"}, ["0"], [], 2),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, [], [], 1),
        ({"CUDA_VISIBLE_DEVICES": MIG_A, "NVIDIA_VISIBLE_DEVICES": f"{MIG_A},{MIG_B}"},
         [MIG_A], [MIG_A], 1),
        ({"NVIDIA_VISIBLE_DEVICES": f" {MIG_A} , {MIG_B} "}, ["0", "1"], [MIG_A, MIG_B], 2),
        ({"CUDA_VISIBLE_DEVICES": "all", "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}, None, [], 2),
        ({"NVIDIA_VISIBLE_DEVICES": "VOID"}, ["0", "1"], [], None),
        ({"NVIDIA_VISIBLE_DEVICES": "none", "CUDA_VISIBLE_DEVICES": " "}, [], [], None),
    ],
)  # fmt: skip
def test_one_parse_of_the_visible_devices_gives_each_reader_its_own(
    env: dict[str, str], cuda: list[str] | None, slices: list[str], count: int | None
) -> None:
    """``node.visible``: what CUDA lists on a host of 2 GPUs (``node.cuda``: a blank value
    lists nothing, CUDA stops at an entry it cannot use), the MIG slices the deciding
    variable names (``budget.gpus``' warning), and how many devices the container sees
    (``budget.caps``: NCCL's headroom; a blank value is unset, a word looks past itself)."""
    from tfboot.budget.caps import several_gpus
    from tfboot.node.cuda import cuda_devices
    from tfboot.node.visible import mig_instances, visible_count

    if cuda is not None:
        assert cuda_devices(env, 2) == (cuda, False)
    assert mig_instances(env) == slices
    assert visible_count(env) == count
    assert several_gpus(env) == (count is not None and count > 1)


# The headroom a share keeps free beside the framework's pool, per framework (its adapter's
# HEADROOM, budget.caps).
HAMI = "CUDA_DEVICE_MEMORY_LIMIT"


def framework_cap(env: dict[str, str], framework: str) -> tuple[int | None, str]:
    settings = resolve({"MEMORY_LIMIT_MB": "auto", **env}, framework)
    return settings.memory_limit_mb, settings.source("MEMORY_LIMIT_MB")


@pytest.mark.parametrize(
    ("framework", "name", "room"),
    [("tensorflow", "TensorFlow", 1536), ("torch", "PyTorch", 1024), ("jax", "JAX", 1024)],
)
@pytest.mark.parametrize(
    "env", [{HAMI: "6144m"}, {MPS: "6G"}, {"ALIYUN_COM_GPU_MEM_CONTAINER": "6"}]
)
def test_each_framework_keeps_its_own_headroom(
    env: dict[str, str], framework: str, name: str, room: int
) -> None:
    """At least what the H200 showed outside each pool after real work (PyTorch 694 MiB, JAX
    626 MiB); TensorFlow's own reserve for compute capability 8.0 and later."""
    cap, source = framework_cap(env, framework)
    assert cap == 6144 - room
    assert f"minus {room} MiB of headroom for {name} (" in source


@pytest.mark.parametrize(
    "env",
    [
        {"CUDA_VISIBLE_DEVICES": "0,1"},
        {"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"},
        {"DISTRIBUTED": "slurm"},
    ],
)
def test_nccl_adds_to_the_headroom_where_it_will_run(env: dict[str, str]) -> None:
    cap, source = framework_cap({HAMI: "8192m", **env}, "torch")
    assert cap == 8192 - 1024 - 1024
    assert "and 1024 MiB for NCCL: " in source


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"DISTRIBUTED": "auto", "JOB_COMPLETION_INDEX": "1", "DIST_TASKS": "2",
          "DIST_HOSTS": "worker=w-{i}.train"}, "DISTRIBUTED=auto found k8s"),
        ({"DISTRIBUTED": "auto", "SLURM_JOB_ID": "7", "SLURM_PROCID": "0",
          "SLURM_STEP_NODELIST": "node1"}, "DISTRIBUTED=auto found slurm"),
        ({"DISTRIBUTED": "k8s", "DIST_TASKS": "2", "DIST_HOSTS": "worker=w-{i}.train",
          "DIST_TASK_INDEX": "0"}, "DISTRIBUTED=k8s"),
    ],
)  # fmt: skip
def test_nccl_is_charged_where_an_engine_forms_a_group(env: dict[str, str], why: str) -> None:
    cap, source = framework_cap({HAMI: "8192m", "CUDA_VISIBLE_DEVICES": "0", **env}, "torch")
    assert cap == 8192 - 1024 - 1024
    assert source.endswith(f"and 1024 MiB for NCCL: {why})"), source


@pytest.mark.parametrize(
    "env",
    [
        {"DISTRIBUTED": "auto"},  # no engine: one process, its line says "single node"
        {"DISTRIBUTED": "auto", "SLURM_JOB_ID": "7"},  # a batch script, outside srun
        {"DISTRIBUTED": "slurm", "SLURM_JOB_ID": "7"},
    ],
)
def test_no_group_no_room_for_nccl(env: dict[str, str]) -> None:
    cap, source = framework_cap({HAMI: "8192m", "CUDA_VISIBLE_DEVICES": "0", **env}, "torch")
    assert cap == 8192 - 1024 and "NCCL" not in source


@pytest.mark.parametrize(
    "env",
    [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"NVIDIA_VISIBLE_DEVICES": "all"},
        {"CUDA_VISIBLE_DEVICES": "0,1", "VISIBLE_GPU": "1"},
    ],
)
def test_one_gpu_needs_no_room_for_nccl(env: dict[str, str]) -> None:
    assert framework_cap({HAMI: "8192m", **env}, "torch")[0] == 8192 - 1024


@pytest.mark.parametrize("framework", ["tensorflow", "torch", "jax"])
def test_memory_headroom_mb_replaces_the_figure(framework: str) -> None:
    env = {HAMI: "8192m", "CUDA_VISIBLE_DEVICES": "0,1", "MEMORY_HEADROOM_MB": "700"}
    cap, source = framework_cap(env, framework)
    assert cap == 8192 - 700 and "minus 700 MiB of headroom" in source
    assert "(MEMORY_HEADROOM_MB=700)" in source
    assert framework_cap({**env, "MEMORY_HEADROOM_MB": "0"}, framework)[0] == 8192


@pytest.mark.parametrize("value", ["-1", "lots", "1048577", "1.5"])
def test_a_bad_headroom_names_the_variable(value: str) -> None:
    text = problem_text({"MEMORY_LIMIT_MB": "auto", HAMI: "8g", "MEMORY_HEADROOM_MB": value})
    assert f"MEMORY_HEADROOM_MB={value!r} is invalid: expected a number of MiB from 0 to" in text


@pytest.mark.parametrize(
    ("framework", "share", "room"), [("tensorflow", "1536m", 1536), ("torch", "1000m", 1024)]
)
def test_a_share_at_or_below_the_headroom_names_both(framework: str, share: str, room: int) -> None:
    with pytest.raises(ConfigError) as info:
        resolve({"MEMORY_LIMIT_MB": "auto", HAMI: share}, framework)
    text = str(info.value)
    assert (
        f"the share of {int(share[:-1])} MiB (HAMi {HAMI}={share}) is at or below {room} MiB"
        in text
    )
    assert "set MEMORY_HEADROOM_MB lower" in text


def test_show_reports_each_installed_frameworks_headroom(capsys, monkeypatch) -> None:
    """The test environment has TensorFlow, JAX and PyTorch installed."""
    import json

    from tfboot.cli import main

    for name in ("MEMORY_HEADROOM_MB", "DISTRIBUTED", "CUDA_VISIBLE_DEVICES", "TFBOOT_ENV_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "GPU-a,GPU-b")
    assert main(["show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["headroom_mib"] == {"TensorFlow": 2560, "JAX": 2048, "PyTorch": 2048}
    assert "NCCL" in shown["headroom_why"]["PyTorch"]


# KAI Scheduler's shares (node.deviceplugin): nvfractions' enforced NVIDIA_GPU_MEMORY_LIMITS,
# and gpusharing's advisory GPU_PORTION of the GPU's memory, whose total the NVML stand-in
# gives (no NVIDIA driver here).
KAI = "NVIDIA_GPU_MEMORY_LIMITS"


@pytest.mark.parametrize("name", [KAI, "NVIDIA_GPU_MEMORY_LIMIT"])
@pytest.mark.parametrize(
    ("env", "room"),
    [({}, 1536), ({"NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b"}, 2560)],
)
def test_kai_memory_limits_are_an_enforced_share(name: str, env: dict, room: int) -> None:
    """fractiond writes one amount in MiB; the toolkit's hook applies it to every GPU."""
    limit, found, source = caps({name: "8192", "NVIDIA_GPU_MEMORY_REQUESTS": "8192", **env})
    assert (limit, found) == (8192 - room, {})
    assert source.startswith(f"KAI {name}=8192 (enforced) minus {room} MiB")


@pytest.mark.parametrize("value", ["0", "lots", "6g", "8192,8192", "-1", "1048577"])
def test_bad_kai_limits_name_the_variable(value: str) -> None:
    text = problem_text({"MEMORY_LIMIT_MB": "auto", KAI: value})
    assert f"{KAI}={value!r} is invalid: expected a whole number of MiB from 1 to" in text


def test_kai_limits_beat_an_advisory_portion(nvml_library: str) -> None:
    env = {KAI: "8192", "GPU_PORTION": "0.50", "TFBOOT_NVML_LIBRARY": nvml_library}
    assert caps(env)[0] == 8192 - 1536


@pytest.mark.parametrize("framework", ["tensorflow", "torch"])
def test_kai_portion_is_a_share_of_nvmls_total(
    nvml_library: str, monkeypatch: pytest.MonkeyPatch, framework: str
) -> None:
    monkeypatch.setenv("FAKE_NVML_MIB", "81559:0")  # read by the stand-in itself
    env = {"GPU_PORTION": "0.25", "TFBOOT_NVML_LIBRARY": nvml_library}
    cap, source = framework_cap(env, framework)
    room = 1536 if framework == "tensorflow" else 1024
    assert cap == 81559 // 4 - room
    assert source.startswith("KAI GPU_PORTION=0.25 of [81559] MiB (advisory) minus ")


@pytest.mark.parametrize("value", ["0", "1.5", "half", "-0.5", ".5."])
def test_a_bad_portion_names_the_variable(nvml_library: str, value: str) -> None:
    env = {"MEMORY_LIMIT_MB": "auto", "GPU_PORTION": value, "TFBOOT_NVML_LIBRARY": nvml_library}
    assert f"GPU_PORTION={value!r} is invalid: expected a fraction above 0" in problem_text(env)


def test_a_portion_without_nvml_says_so(tmp_path) -> None:
    env = {"MEMORY_LIMIT_MB": "auto", "GPU_PORTION": "0.50",
           "TFBOOT_NVML_LIBRARY": str(tmp_path / "none.so")}  # fmt: skip
    text = problem_text(env)
    assert "GPU_PORTION='0.50' is invalid: a portion of each GPU's memory" in text
    assert "set MEMORY_LIMIT_MB to a number of MiB" in text


@pytest.mark.parametrize("off", ["true", "1", "True"])
def test_hami_with_its_enforcement_off_is_an_advisory_share(off: str) -> None:
    """HAMi's device plugin preloads no HAMi-core where CUDA_DISABLE_CONTROL parses true (Go's
    ParseBool): the share is still the container's, said as not enforced."""
    _, per_gpu, source = caps({"CUDA_DEVICE_MEMORY_LIMIT_0": "6144m", "CUDA_DISABLE_CONTROL": off})
    assert per_gpu == {0: 6144 - 1536}
    assert source.startswith(f"HAMi CUDA_DEVICE_MEMORY_LIMIT_0=6144m, not enforced: "
                             f"CUDA_DISABLE_CONTROL={off} (advisory) minus 1536 MiB")  # fmt: skip
    enforced = caps({"CUDA_DEVICE_MEMORY_LIMIT_0": "6144m", "CUDA_DISABLE_CONTROL": "false"})
    assert "(enforced) minus 1536 MiB" in enforced[2] and "not enforced" not in enforced[2]


# MPS memory partitioning: the hard limit the kernel's dmem controller holds for the
# container (fake cgroup trees under testdata/cgroup, read through TFBOOT_CGROUP_ROOT).
TREES = Path(__file__).parent / "testdata" / "cgroup"


def partitioned(tree: str, **env: str) -> dict[str, str]:
    return {PIPE: "/tmp/nvidia-mps", "TFBOOT_CGROUP_ROOT": str(TREES / tree), **env}


def test_an_mps_partition_in_dmem_max_is_the_share() -> None:
    limit, per_gpu, source = caps(partitioned("v2-dmem"))
    assert (limit, per_gpu) == (6144 - 1536, {})
    assert source.startswith(
        "MPS /sys/fs/cgroup/kubepods/pod1/dmem.max nvidia/0000:af:00.0/vidmem (enforced) "
        "minus 1536 MiB of headroom for TensorFlow"
    )
    assert partition_total(partitioned("v2-dmem")) == 6144 << 20


def test_dmem_max_is_read_only_in_an_mps_client() -> None:
    env = partitioned("v2-dmem")
    del env[PIPE]
    assert partition_total(env) is None
    assert "none is set" in problem_text({"MEMORY_LIMIT_MB": "auto", **env})


def test_the_smaller_of_a_partition_and_the_hooks_variable_holds() -> None:
    limit, _, source = caps(partitioned("v2-dmem", NVIDIA_GPU_MEMORY_LIMIT="4096"))
    assert limit == 4096 - 1536 and "KAI NVIDIA_GPU_MEMORY_LIMIT=4096" in source


def test_a_malformed_dmem_max_names_the_file_and_line() -> None:
    text = problem_text({"MEMORY_LIMIT_MB": "auto", **partitioned("v2-dmem-garbage")})
    assert (
        "an MPS memory limit, but /sys/fs/cgroup/kubepods/pod1/ctr/dmem.max: line 1 is not" in text
    )
    assert "lots" not in text.replace("'<region> <bytes>|max'", "")


NESTED = "/sys/fs/cgroup/kubepods/burstable/pod1/ctr"  # v2-nested's container cgroup
NVML_SOURCE = Path(__file__).parent / "frameworks" / "fake_nvml" / "nvml.c"


def test_without_dmem_max_nvmls_limits_for_the_containers_cgroup_are_the_share(
    nvml_library: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver's fallback: no ``dmem`` controller, the limit held by the driver and read
    through ``nvmlDeviceGetMemoryLimits_v1`` with the container's own cgroup as its
    namespace (the stand-in answers only for ``FAKE_NVML_CGROUP``)."""
    monkeypatch.setenv("FAKE_NVML_MIB", "81559:0,81559:0")
    monkeypatch.setenv("FAKE_NVML_CGROUP", NESTED)
    monkeypatch.setenv("FAKE_NVML_LIMITS", "8192,6144")
    env = partitioned("v2-nested", TFBOOT_NVML_LIBRARY=nvml_library)
    limit, per_gpu, source = caps(env)
    assert (limit, per_gpu) == (6144 - 1536, {})
    assert source.startswith(f"MPS NVML memory limits of {NESTED} (GPU 1, the smallest)")
    assert partition_total(env) == 6144 << 20
    monkeypatch.setenv("FAKE_NVML_CGROUP", "/sys/fs/cgroup/another")
    assert partition_total(env) is None  # another cgroup's limits are not this container's


@pytest.mark.parametrize("limits", ["max,max", None])
def test_no_nvml_limit_is_no_share(
    nvml_library: str, monkeypatch: pytest.MonkeyPatch, limits: str | None
) -> None:
    """``NVML_DEVICE_MEMORY_LIMIT_MAX`` limits nothing; a GPU without partitioning answers
    ``NVML_ERROR_NOT_SUPPORTED``: either way no share, and auto says none is set."""
    monkeypatch.setenv("FAKE_NVML_MIB", "81559:0,81559:0")
    monkeypatch.setenv("FAKE_NVML_CGROUP", NESTED)
    if limits is None:
        monkeypatch.delenv("FAKE_NVML_LIMITS", raising=False)
    else:
        monkeypatch.setenv("FAKE_NVML_LIMITS", limits)
    env = partitioned("v2-nested", TFBOOT_NVML_LIBRARY=nvml_library)
    assert partition_total(env) is None
    assert "none is set" in problem_text({"MEMORY_LIMIT_MB": "auto", **env})


def test_a_driver_without_the_call_reads_no_nvml_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A driver before 615: its library has no ``nvmlDeviceGetMemoryLimits_v1`` (the
    stand-in built without it); nothing is called, nothing read."""
    old = tmp_path / "libnvidia-ml-old.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-DOLD_DRIVER", "-o", str(old), str(NVML_SOURCE)],
                   check=True)  # fmt: skip
    monkeypatch.setenv("FAKE_NVML_MIB", "81559:0")
    monkeypatch.setenv("FAKE_NVML_CGROUP", NESTED)
    monkeypatch.setenv("FAKE_NVML_LIMITS", "6144")
    assert partition_total(partitioned("v2-nested", TFBOOT_NVML_LIBRARY=str(old))) is None


def test_dmem_max_holds_before_nvml(nvml_library: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel holds the limit, ``dmem.max`` is read and NVML is not asked."""
    monkeypatch.setenv("FAKE_NVML_MIB", "81559:0")
    monkeypatch.setenv("FAKE_NVML_CGROUP", "/sys/fs/cgroup/kubepods/pod1/ctr")
    monkeypatch.setenv("FAKE_NVML_LIMITS", "2048")
    env = partitioned("v2-dmem", TFBOOT_NVML_LIBRARY=nvml_library)
    assert partition_total(env) == 6144 << 20


def test_jax_takes_its_fraction_of_the_partition_never_the_whole_gpu(
    nvml_library: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """XLA multiplies the fraction by the total ``cuMemGetInfo`` reports, the partition's
    under MPS memory partitioning. The GPUs are the NVML stand-in's; the CUDA plugin JAX
    would find is a fake (an empty ``jax_plugins.xla_cuda13`` package: no CUDA JAX here)."""
    (tmp_path / "jax_plugins" / "xla_cuda13").mkdir(parents=True)
    (tmp_path / "jax_plugins" / "xla_cuda13" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("FAKE_NVML_MIB", "81559:0")  # read by the stand-in itself
    env = partitioned("v2-dmem", TFBOOT_NVML_LIBRARY=nvml_library)
    assert jax_gpus(env) == (6144 << 20,)
    assert fraction_text(4608, jax_gpus(env)[0]) == "0.750000"  # 4608 MiB of 6144
    del env[PIPE]  # no partition: the whole GPU is CUDA's total
    assert jax_gpus(env) == (81559 << 20,)


# What each PyTorch release's caching allocator multiplies set_per_process_memory_fraction's
# fraction by, read from its wheel's libc10_cuda.so (setMemoryFraction calls cudaMemGetInfo,
# or reads the device properties' totalGlobalMem): (native allocator, cudaMallocAsync).
ALLOCATOR_TOTALS = {
    "2.4.0": ("cudaMemGetInfo", "cudaMemGetInfo"),
    "2.7.0": ("cudaMemGetInfo", "cudaMemGetInfo"),
    "2.9.1+cu128": ("cudaMemGetInfo", "cudaMemGetInfo"),
    "2.10.0": ("totalGlobalMem", "cudaMemGetInfo"),
    "2.13.0": ("totalGlobalMem", "cudaMemGetInfo"),
    "2.15.0+cu130": ("totalGlobalMem", "cudaMemGetInfo"),
}


class StandInCuda:
    """A stand-in for a CUDA build's ``torch.cuda`` (a fake: no CUDA GPU or CUDA PyTorch
    here): one GPU of ``physical`` bytes whose ``cudaMemGetInfo`` reports ``reported`` as
    its total, as under an MPS limit or partition, and an allocator that keeps as its
    limit the fraction times the total ``ALLOCATOR_TOTALS`` says that release takes."""

    def __init__(self, version: str, backend: str, physical: int, reported: int) -> None:
        self.takes = ALLOCATOR_TOTALS[version][backend == "cudaMallocAsync"]
        self.backend, self.physical, self.reported = backend, physical, reported
        self.queued: list = []
        self.limit: dict[int, int] = {}

    def _lazy_call(self, call) -> None:  # type: ignore[no-untyped-def]
        self.queued.append(call)

    def start(self) -> None:
        for call in self.queued:
            call()

    def device_count(self) -> int:
        return 1

    def get_allocator_backend(self) -> str:
        return self.backend

    def get_device_properties(self, ordinal: int):  # type: ignore[no-untyped-def]
        return type("Properties", (), {"total_memory": self.physical})

    def mem_get_info(self, ordinal: int) -> tuple[int, int]:
        return self.reported - (512 << 20), self.reported  # the context holds some

    def set_per_process_memory_fraction(self, fraction: float, ordinal: int) -> None:
        total = self.reported if self.takes == "cudaMemGetInfo" else self.physical
        self.limit[ordinal] = int(fraction * total)


SHARES = {
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": ({MPS: "0=6G"}, ""),
    "an MPS partition read through NVML": (partitioned("v2-nested"), "6144"),
}


@pytest.mark.parametrize("version", ALLOCATOR_TOTALS)
@pytest.mark.parametrize("backend", ["native", "cudaMallocAsync"])
@pytest.mark.parametrize("share", SHARES)
@pytest.mark.parametrize("asked", ["auto", "5400"])
def test_pytorch_enforces_the_cap_asked_for_under_a_share(
    nvml_library: str, monkeypatch: pytest.MonkeyPatch, version: str, backend: str, share: str,
    asked: str,
) -> None:  # fmt: skip
    """An 81559 MiB GPU with a 6144 MiB share, whose ``cudaMemGetInfo`` reports the share as
    its total: the limit PyTorch's allocator keeps is the cap tfboot planned, whichever
    total that release multiplies the fraction by. The GPU and the partition come from the
    NVML stand-in; PyTorch's CUDA side from ``StandInCuda``."""
    from tfboot.adapters import Patch
    from tfboot.adapters.torch import plan_torch
    from tfboot.budget import make_budget
    from tfboot.executor.patches import torch_caps
    from tfboot.node.cuda import cuda_devices

    extra, limits = SHARES[share]
    monkeypatch.setenv("FAKE_NVML_MIB", "81559:0")
    monkeypatch.setenv("FAKE_NVML_CGROUP", NESTED)
    monkeypatch.setenv("FAKE_NVML_LIMITS", limits or "max")
    env = {"MEMORY_LIMIT_MB": asked, "TFBOOT_NVML_LIBRARY": nvml_library, **extra}
    plan = plan_torch(make_budget(resolve(env, "torch"), env), cuda_devices(env, 1)[0])
    args = next(c.args for c in plan.calls if isinstance(c, Patch) and c.name == "torch caps")
    cap = args[0][0]
    assert cap == (6144 - 1024 if asked == "auto" else 5400)  # PyTorch's headroom: 1024 MiB
    cuda = StandInCuda(version, backend, 81559 << 20, 6144 << 20)
    torch = type("torch", (), {"__version__": version, "cuda": cuda})
    torch_caps(torch, *args)  # type: ignore[arg-type]
    cuda.start()
    assert (cap << 20) - 1 <= cuda.limit[0] <= cap << 20, (cuda.limit[0] >> 20, cap)


def test_a_cap_over_the_share_pytorch_multiplies_by_fails_cuda_s_start() -> None:
    """Where PyTorch takes the fraction of ``cudaMemGetInfo``'s total (2.9 here), a cap over
    the share that total is cannot be given as a fraction: CUDA's start fails, naming it."""
    from tfboot.executor.patches import torch_caps

    cuda = StandInCuda("2.9.1+cu128", "native", 81559 << 20, 6144 << 20)
    torch_caps(type("torch", (), {"__version__": "2.9.1+cu128", "cuda": cuda}), {0: 8192}, "8192")
    with pytest.raises(ConfigError, match="the cap of 8192 MiB is more than the 6144 MiB cuda:0"):
        cuda.start()

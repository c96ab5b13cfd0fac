"""``apply`` carries out the plan, in the order TensorFlow requires, without TensorFlow.

``RecordingTF`` is a stand-in for the ``tensorflow`` module, named as such: it records
each ``tf.config`` call and returns plain objects, so the order of the calls and the
arguments the executor builds from the plan can be read without importing TensorFlow. The
real-TensorFlow tests (``test_tensorflow.py``) prove the same calls against the real one.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from support import tf_plan
from tfboot import ConfigError
from tfboot.adapters import Call
from tfboot.adapters import tensorflow as adapter
from tfboot.executor import Reader, execute
from tfboot.node.cpu import CpuBudget

QUOTA_2 = CpuBudget(affinity=8, quota=2.0, quota_source="/sys/fs/cgroup/cpu.max")


class RecordingTF:
    """A stand-in for ``tensorflow`` (not the real module): records the calls made on it."""

    def __init__(self, refuse: str = "", gpus: int = 0) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.refuse = refuse  # a call that raises RuntimeError, as after the runtime started
        self.config = SimpleNamespace(
            set_visible_devices=self._record("set_visible_devices"),
            set_logical_device_configuration=self._record("set_logical_device_configuration"),
            set_soft_device_placement=self._record("set_soft_device_placement"),
            list_physical_devices=lambda kind: (
                GPUS[:gpus]
                if kind == "GPU"
                else [SimpleNamespace(name=f"/physical_device:{kind}:0")]
            ),
            LogicalDeviceConfiguration=lambda memory_limit=None: SimpleNamespace(
                memory_limit=memory_limit
            ),
            experimental=SimpleNamespace(set_memory_growth=self._record("set_memory_growth")),
            threading=SimpleNamespace(
                set_intra_op_parallelism_threads=self._record("intra"),
                set_inter_op_parallelism_threads=self._record("inter"),
            ),
            optimizer=SimpleNamespace(set_jit=self._record("set_jit")),
        )
        self.debugging = SimpleNamespace(
            set_log_device_placement=self._record("set_log_device_placement")
        )

    def _record(self, name: str) -> Any:
        def call(*args: Any) -> None:
            if name == self.refuse:
                raise RuntimeError(f"{name} cannot be modified after initialization")
            self.calls.append((name, args))

        return call


GPUS = [SimpleNamespace(name=f"/physical_device:GPU:{i}") for i in range(3)]


def run(env: dict[str, str], gpus: int, tf: RecordingTF | None = None) -> RecordingTF:
    tf = tf or RecordingTF(gpus=gpus)
    tf.config.list_physical_devices = RecordingTF(gpus=gpus).config.list_physical_devices
    execute(adapter, tf_plan(env, gpus, QUOTA_2), Reader(tf))  # type: ignore[arg-type]
    return tf


def test_every_call_in_the_order_tensorflow_requires() -> None:
    env = {
        "VISIBLE_GPU": "0,2",
        "MEMORY_LIMIT_MB": "4096",
        "VIRTUAL_SPLIT": "2",
        "SOFT_PLACEMENT": "true",
        "LOG_DEVICE_PLACEMENT": "false",
        "XLA_JIT": "true",
    }
    names = [name for name, _ in run(env, gpus=3).calls]
    assert names == [
        "set_visible_devices",
        "set_logical_device_configuration",
        "set_logical_device_configuration",
        "intra",
        "inter",
        "set_soft_device_placement",
        "set_log_device_placement",
        "set_jit",
    ]


def test_arguments_are_tensorflows_devices_and_configurations() -> None:
    tf = run({"VISIBLE_GPU": "1", "MEMORY_LIMIT_MB": "3000", "VIRTUAL_SPLIT": "1000,2000"}, 3)
    (_, (visible, kind)), (_, (device, logical)) = tf.calls[:2]
    assert [d.name for d in visible] == ["/physical_device:GPU:1"] and kind == "GPU"
    assert device.name == "/physical_device:GPU:1"
    assert [c.memory_limit for c in logical] == [1000, 2000]


def test_growth_without_a_cap_is_set_on_every_visible_gpu_before_threads() -> None:
    tf = run({"MEMORY_GROWTH": "true"}, gpus=2)
    assert [(n, a[0].name) for n, a in tf.calls[:2]] == [
        ("set_memory_growth", "/physical_device:GPU:0"),
        ("set_memory_growth", "/physical_device:GPU:1"),
    ]
    assert [n for n, _ in tf.calls[2:]] == ["intra", "inter"]


def test_growth_under_a_cap_is_the_environment_not_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    tf = run({"MEMORY_GROWTH": "true", "MEMORY_LIMIT_MB": "2048"}, gpus=1)
    assert "set_memory_growth" not in [n for n, _ in tf.calls]
    import os

    assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"


def test_a_split_without_gpus_splits_cpu_0() -> None:
    (name, (device, logical)), *_ = run({"VIRTUAL_SPLIT": "3"}, gpus=0).calls
    assert name == "set_logical_device_configuration"
    assert device.name == "/physical_device:CPU:0" and len(logical) == 3


def test_every_call_has_its_reason() -> None:
    plan = tf_plan({"VIRTUAL_SPLIT": "2", "MEMORY_LIMIT_MB": "2048"}, 1, QUOTA_2)
    assert [call.reason for call in plan.calls if isinstance(call, Call)] == [
        "logical GPUs GPU:0 -> [1024, 1024] MiB "
        "(MEMORY_LIMIT_MB=2048 (env), VIRTUAL_SPLIT=2 (env))",
        "intra-op threads 2 (CPU_THREADS=auto: quota 2 CPUs from /sys/fs/cgroup/cpu.max, "
        "rounded up)",
        "inter-op threads 2 (CPU_THREADS=auto: quota 2 CPUs from /sys/fs/cgroup/cpu.max, "
        "rounded up)",
    ]


def test_a_refused_call_names_what_was_applied_before_it() -> None:
    with pytest.raises(ConfigError) as info:
        run({"VIRTUAL_SPLIT": "2"}, gpus=0, tf=RecordingTF(refuse="intra"))
    text = str(info.value)
    assert "tf.config.set_intra_op_parallelism_threads(2) was refused" in text
    assert "set_logical_device_configuration(/physical_device:CPU:0" in text

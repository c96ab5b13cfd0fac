"""With no setting that needs it, tfboot leaves TensorFlow's device list unbuilt at import.

Plain TensorFlow builds its physical device list on first use: until then its eager
context holds ``_physical_devices = None`` (``context.context()._initialize_physical_devices``
fills it, which on a CUDA build initialises the driver). That private attribute is the
one observable sign here that nothing listed devices: the tests compare it right after
``import tensorflow`` with tfboot (applying the CPU-quota default under a fake cgroup
root) and without it (``TFBOOT_DISABLE``), and show that a GPU setting does build it.
"""

from __future__ import annotations

import json

import pytest
from support import REPO, run_python

pytestmark = pytest.mark.tf

CGROUP = str(REPO / "tests" / "testdata" / "cgroup" / "v2-quota")
STATE = (
    "import json, tensorflow as tf; from tensorflow.python.eager import context; "
    "c = context.context(); print(json.dumps({'listed': c._physical_devices is not None, "
    "'runtime': c._context_handle is not None, "
    "'threads': tf.config.threading.get_intra_op_parallelism_threads()}))"
)


def device_state(env: dict[str, str]) -> dict[str, object]:
    run = run_python(STATE, {"TFBOOT_CGROUP_ROOT": CGROUP, **env})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_unused_tfboot_leaves_the_device_list_as_plain_tensorflow_does() -> None:
    plain = device_state({"TFBOOT_DISABLE": "1"})
    ours = device_state({})
    assert plain == {"listed": False, "runtime": False, "threads": 0}
    # Same device state; only the CPU-quota default (1.5 CPUs -> 2 threads) was applied.
    assert ours == {**plain, "threads": 2}


@pytest.mark.parametrize(
    "env", [{"MEMORY_GROWTH": "true"}, {"REQUIRE_GPU": "false"}, {"VIRTUAL_SPLIT": "2"}]
)
def test_a_device_setting_lists_devices(env: dict[str, str]) -> None:
    assert device_state(env)["listed"] is True

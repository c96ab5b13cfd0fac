"""One selftest row in a fresh process: ``python -m tfboot.selftest.child KIND [CAP_MB]``.

The parent (``runner``) sets the row's variables in this process's environment;
importing TensorFlow applies them through tfboot's hook (``apply`` below is a no-op
then, and applies them when the hook is not installed). Then one measurement runs and
its result is printed as one JSON line on stdout:

- ``probe``: TensorFlow's version and physical GPUs; starts no runtime.
- ``place``: put a 1 MiB block on every logical GPU and say where it landed.
- ``fill``: fill every logical GPU up to ``CAP_MB`` and check the next allocation fails
  (``tfboot.verify``, the same code as ``tfboot doctor --verify``).

Any error, tfboot's or TensorFlow's, is reported as ``{"error": ...}`` for the parent to
judge; this module never prints a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

BLOCK_BYTES = 1 << 20


def _probe(tf: Any) -> dict[str, Any]:
    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        try:
            model = str(tf.config.experimental.get_device_details(device).get("device_name", ""))
        except Exception:  # some plugins answer only once the runtime runs
            model = ""
        gpus.append({"name": device.name, "model": model})
    return {"tensorflow": tf.__version__, "cuda": bool(tf.test.is_built_with_cuda()), "gpus": gpus}


def _place(tf: Any) -> dict[str, Any]:
    placed = {}
    for device in tf.config.list_logical_devices("GPU"):
        with tf.device(device.name):
            block = tf.zeros([BLOCK_BYTES // 4], dtype=tf.float32)
        placed[device.name] = {
            "landed_on": block.device,
            "current_bytes": int(tf.config.experimental.get_memory_info(device.name)["current"]),
        }
    return {"placed": placed}


def _fill(tf: Any, cap_mb: int) -> dict[str, Any]:
    from ..verify import verify_gpus

    names = [device.name for device in tf.config.list_logical_devices("GPU")]
    return {"fill": verify_gpus(tf, dict.fromkeys(names, cap_mb))}


def _jit(tf: Any) -> dict[str, Any]:
    import os

    with tf.device("/GPU:0"):
        run = tf.function(lambda x: tf.reduce_sum(x * 2.0 + 1.0), jit_compile=True)
        value = float(run(tf.ones([1024])))
    return {"jit_value": value, "xla_flags": os.environ.get("XLA_FLAGS")}


def measure(kind: str, args: Sequence[str]) -> dict[str, Any]:
    """Import TensorFlow, apply the environment, run measurement ``kind``."""
    import tensorflow as tf

    from ..executor import apply

    result = apply(tf)
    out: dict[str, Any] = {"kind": kind, "warnings": list(result.warnings)}
    if kind == "probe":
        out.update(_probe(tf))
    elif kind == "place":
        out.update(_place(tf))
    elif kind == "fill":
        out.update(_fill(tf, int(args[0])))
    elif kind == "jit":
        out.update(_jit(tf))
    else:
        out["error"] = f"unknown measurement {kind!r}"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        out = measure(argv[0], argv[1:])
    except Exception as exc:  # reported to the parent, which turns it into a FAIL line
        first_line = str(exc).strip().splitlines()[:1] or [""]
        out = {"error": f"{type(exc).__name__}: {first_line[0]}"}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""TEST-ONLY SHIM. PRIVATE TENSORFLOW API. NEVER SHIP THIS, NEVER IMPORT IT FROM tfboot.

What it fixes: TensorFlow's C++ runtime (tf-nightly 2.22) can split and cap
PluggableDevices into logical devices, but its Python layer never tells it to.
``Context._compute_device_options`` passes the logical-device configuration
(``virtual_devices``) only when ``device_type == "GPU"``, which feeds
``ConfigProto.gpu_options`` (read by the CUDA device factory only), while the
PluggableDevice factory reads ``ConfigProto.pluggable_device_options``. So the
public ``tf.config.set_logical_device_configuration`` is accepted and then
silently ignored on a pluggable "GPU", such as the simulated GPU of these tests.

What it does: wraps the private ``Context._compute_pluggable_device_options`` so
that the same memory limits (and priorities) the user configured reach
``pluggable_device_options.experimental.virtual_devices``, with CUDA's rule that
``allow_growth`` is not set once logical devices exist. The simulated GPU then
behaves like a CUDA GPU under tfboot, through tfboot's ordinary public calls.

How it loads: put this directory first on ``PYTHONPATH``; this ``sitecustomize``
installs a meta-path hook that patches ``tensorflow.python.eager.context`` right
after that module executes (during ``import tensorflow``, before any op). It
never imports TensorFlow itself. It depends on private names of one pinned
nightly (``PINNED``); on another version it warns once, and if the private
method is gone it raises ImportError rather than let a test pass for the wrong
reason.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

TARGET = "tensorflow.python.eager.context"
PINNED = ("tf-nightly-cpu", "2.22.0.dev20260905")


def _routed_options(original: Callable[[Any], Any], config_pb2: Any) -> Callable[[Any], Any]:
    """Wrap ``_compute_pluggable_device_options`` to carry the logical-device config."""

    def compute(self: Any) -> Any:
        options = original(self)
        if not self._virtual_device_map:
            return options
        virtual_devices = []
        for dev in self._pluggable_devices:
            if dev not in self._visible_device_list:
                continue
            vdevs = self._virtual_device_map.get(dev, [])
            virtual_devices.append(
                config_pb2.GPUOptions.Experimental.VirtualDevices(
                    memory_limit_mb=[v.memory_limit for v in vdevs],
                    priority=[
                        v.experimental_priority
                        for v in vdevs
                        if v.experimental_priority is not None
                    ],
                )
            )
        del options.experimental.virtual_devices[:]
        options.experimental.virtual_devices.extend(virtual_devices)
        options.ClearField("allow_growth")
        return options

    return compute


def _patch(module: types.ModuleType) -> None:
    context_cls = module.Context
    original = getattr(context_cls, "_compute_pluggable_device_options", None)
    if original is None or not hasattr(context_cls, "_compute_device_options"):
        raise ImportError(
            "pluggable_shim: this TensorFlow has no Context._compute_pluggable_device_options; "
            f"the shim only supports {PINNED[0]}=={PINNED[1]}"
        )
    from tensorflow.core.protobuf import config_pb2

    context_cls._compute_pluggable_device_options = _routed_options(original, config_pb2)


def _check_version() -> None:
    try:
        version = importlib.metadata.version(PINNED[0])
    except importlib.metadata.PackageNotFoundError:
        version = None
    if version != PINNED[1]:
        print(
            f"pluggable_shim: warning: written for {PINNED[0]}=={PINNED[1]}, found {version}",
            file=sys.stderr,
        )


class _PatchAfterExec(importlib.abc.MetaPathFinder):
    """Find ``TARGET`` through the other finders, then patch it once it has executed."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_patch(module: types.ModuleType) -> None:
            exec_module(module)
            _check_version()
            _patch(module)

        loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


if TARGET in sys.modules:
    _patch(sys.modules[TARGET])
else:
    sys.meta_path.insert(0, _PatchAfterExec())

"""tf.data defaults for every pipeline of the process: autotune's RAM and CPU budgets.

The RAM budget is measured as each pipeline starts: the room the working set leaves under
the limit in force then (``budget.hostpolicy.ram_budget``): a resize since the import
counts, as the governor counts it (``node.livelimits``). One reading of the cgroup's files.

How they are injected. TensorFlow hands every dataset it is about to run through one
method, ``DatasetV2._apply_debug_options``: eager and graph iterators (``iter``, a ``for``
loop, Keras ``fit``/``evaluate``/``predict``), ``Dataset.reduce`` (what a ``for`` loop
over a dataset in a ``tf.function`` becomes), ``tf.distribute``'s distributed datasets
and multi-device iterators, prefetching to a device, ``save`` and the tf.data service.
tfboot wraps that method: the dataset it returns carries tfboot's defaults under the
pipeline's own options (``tf.data.Options`` merged field by field, the pipeline's last),
so a field the pipeline set itself always wins. An error of TensorFlow's (a map function's,
raised as ``get_single_element`` runs the pipeline) goes on with the frames it has without
tfboot (``frames.hidden``).

Two paths read a dataset's variant tensor without that method (TensorFlow 2.21,
``tensorflow/python/data/ops/dataset_ops.py``), and are wrapped as well:

- ``Dataset.get_single_element`` (and ``tf.data.experimental.get_single_element``);
- ``DatasetSpec._to_components``: a dataset passed into a ``tf.function`` as an argument
  crosses there, eagerly, where its own options are known; inside the function it is a
  ``_VariantDataset`` whose options live only in the graph.

The defaults are added only where the pipeline's own options are known: eagerly, or in a
graph for a pipeline built in Python. A dataset rebuilt from a variant tensor inside a
graph (a ``tf.function`` argument, ``from_variant``) gets nothing more there: it got the
defaults, under its own options, when it crossed into the function.

What it cannot reach: a dataset iterated by C++ code that never passes through Python
(a SavedModel's own input pipeline run by the C++ API, TF Serving). Where the method does
not exist (a TensorFlow that renamed it), nothing is injected and TensorFlow's plan says
so in one warning.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..adapters.tensorflow import DATA_HOOK as HOOK
from ..budget.hostmemory import DataDefaults
from ..budget.hostpolicy import ram_budget
from ..frames import hidden
from ..node.cpu import cgroup_root
from ..node.livelimits import LimitFiles
from ..node.workingset import ProcessTree, WorkingSet, reader

MIB = 1 << 20
MAX_INPUTS = 10_000  # a pipeline's datasets walked to find its source


class Room:
    """The limit in force and the working set under it, read as a pipeline starts.

    A figure (``HOST_MEMORY_LIMIT_MB=N``, ``limit_file`` "") stays the figure; the cgroup's
    limit is read again, and a parent's limit that became the tightest brings its own
    working set. A limit that can no longer be read, or was lifted, leaves the planned one.
    """

    def __init__(self, root: str, limit_mib: int, limit_file: str) -> None:
        self.root, self.limit_mib, self.file = root, limit_mib, limit_file
        self.limits = LimitFiles(root) if self.file else None
        self.working: WorkingSet | ProcessTree = reader(root, self.file)

    def read(self) -> tuple[int, int | None]:
        """The limit in MiB and the working set in bytes (None: unread) now."""
        found = self.limits.read() if self.limits is not None else None
        if found is not None and found[0] is not None:
            self.limit_mib = max(1, found[0] // MIB)
            if os.path.dirname(found[1]) != os.path.dirname(self.file):
                self.file, self.working = found[1], reader(self.root, found[1])
        return self.limit_mib, self.working.read()


def _fields(defaults: DataDefaults, now: tuple[int, int | None] | None) -> dict[str, int]:
    """The ``tf.data.Options().autotune`` fields tfboot sets, and their values, with the
    limit and the bytes in use ``now`` (None: the RAM budget as planned)."""
    ram = defaults.ram_budget_mib
    if now is not None and now[1] is not None:
        ram = ram_budget(now[0], now[1] // MIB)
    fields = {
        "ram_budget": None if ram is None else ram * MIB,
        "cpu_budget": defaults.cpu_budget,
        "initial_parallelism": defaults.initial_parallelism,
    }
    return {name: value for name, value in fields.items() if value is not None}


def _filling(tf: ModuleType, own: Any, fields: dict[str, int]) -> Any:
    """Options setting only the fields the pipeline left unset (None: nothing to add).

    Setting only those, not merging over the pipeline's, keeps TensorFlow from logging
    "Changing the value of option ..." for a field the pipeline chose.
    """
    options, added = tf.data.Options(), False
    for name, value in fields.items():
        if hasattr(own.autotune, name) and getattr(own.autotune, name) is None:
            setattr(options.autotune, name, value)
            added = True
    return options if added else None


def _dataset_class(tf: ModuleType) -> Any:
    data = getattr(tf, "data", None)
    dataset = getattr(data, "Dataset", None)
    return next((c for c in getattr(dataset, "__mro__", ()) if HOOK in vars(c)), None)


def _own_options(tf: ModuleType, dataset: Any, variant: Any) -> Any:
    """The pipeline's own options; None where they cannot be known (a graph's variant).

    In a graph (a ``tf.function``), ``options()`` warns that it gives the options tracked
    in Python, which is what tfboot needs for a pipeline built there: read those directly.
    """
    if tf.executing_eagerly():
        return dataset.options()
    if variant is not None and _rebuilt(dataset, variant):
        return None
    tracked = getattr(dataset, "_options_attr", None)
    if tracked is not None:
        return tracked
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dataset.options()


def _rebuilt(dataset: Any, variant: type) -> bool:
    """True when the pipeline starts from a variant tensor: its options are the graph's."""
    seen, pending = 0, [dataset]
    while pending and seen < MAX_INPUTS:
        node = pending.pop()
        seen += 1
        if isinstance(node, variant):
            return True
        inputs = getattr(node, "_inputs", None)
        pending += list(inputs()) if callable(inputs) else []
    return False


def _wrap(owner: type, name: str, make: Callable[[Any], Any]) -> None:
    """Replace ``owner.name`` with ``make(original)``; a second install replaces the first."""
    original = vars(owner)[name]
    original = getattr(original, "tfboot_original", original)
    wrapped = make(original)
    wrapped.tfboot_original = original
    setattr(owner, name, wrapped)


def install(tf: ModuleType, defaults: DataDefaults) -> bool:
    """Give every pipeline ``defaults``; False where TensorFlow has no Dataset hook (the
    adapter knew it as a fact, and its plan says so in a warning)."""
    owner = _dataset_class(tf)
    if owner is None:
        return False
    root = cgroup_root(os.environ)
    limit = defaults.limit_mib
    room = None if limit is None else Room(root, limit, defaults.limit_file)
    module = sys.modules.get(owner.__module__)
    variant = getattr(module, "_VariantDataset", None)
    spec = getattr(module, "DatasetSpec", None)

    def filled(dataset: Any) -> Any:
        own = _own_options(tf, dataset, variant)
        ours = _fields(defaults, None if room is None else room.read())
        filling = None if own is None else _filling(tf, own, ours)
        return dataset if filling is None else dataset.with_options(filling)

    def debugging(original: Any) -> Any:
        def apply_debug_options(self: Any) -> Any:
            with hidden:
                dataset = original(self)
            return filled(dataset)

        return apply_debug_options

    def single(original: Any) -> Any:
        def get_single_element(self: Any, *args: Any, **kwargs: Any) -> Any:
            dataset = filled(self)
            with hidden:
                return original(dataset, *args, **kwargs)

        return get_single_element

    def crossing(original: Any) -> Any:
        def to_components(self: Any, value: Any) -> Any:
            eager = isinstance(value, owner) and tf.executing_eagerly()
            value = filled(value) if eager else value
            with hidden:
                return original(self, value)

        return to_components

    _wrap(owner, HOOK, debugging)
    if "get_single_element" in vars(owner):
        _wrap(owner, "get_single_element", single)
    if spec is not None and "_to_components" in vars(spec):
        _wrap(spec, "_to_components", crossing)
    return True

"""tf.data defaults for every pipeline of the process: autotune's RAM and CPU budgets.

How they are injected. TensorFlow hands every dataset it is about to run through one
method, ``DatasetV2._apply_debug_options``: eager and graph iterators (``iter``, a ``for``
loop, Keras ``fit``/``evaluate``/``predict``), ``Dataset.reduce`` (what a ``for`` loop
over a dataset in a ``tf.function`` becomes), ``tf.distribute``'s distributed datasets
and multi-device iterators, prefetching to a device, ``save`` and the tf.data service.
tfboot wraps that method: the dataset it returns carries tfboot's defaults under the
pipeline's own options (``tf.data.Options`` merged field by field, the pipeline's last),
so a field the pipeline set itself always wins.

What it cannot reach: a dataset iterated by C++ code that never passes through Python
(a SavedModel's own input pipeline run by the C++ API, TF Serving). Where the method does
not exist (a TensorFlow that renamed it), nothing is injected and one warning says so.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

from ..adapters.tensorflow import DATA_HOOK as HOOK
from ..budget.hostmemory import DataDefaults

MIB = 1 << 20


def _fields(defaults: DataDefaults) -> dict[str, int]:
    """The ``tf.data.Options().autotune`` fields tfboot sets, and their values."""
    fields = {
        "ram_budget": None if defaults.ram_budget_mib is None else defaults.ram_budget_mib * MIB,
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


def _own_options(tf: ModuleType, dataset: Any) -> Any:
    """The pipeline's own options. In a graph (a ``tf.function``), ``options()`` warns that it
    gives the options tracked in Python, which is what tfboot needs: read those directly."""
    if tf.executing_eagerly():
        return dataset.options()
    tracked = getattr(dataset, "_options_attr", None)
    if tracked is not None:
        return tracked
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dataset.options()


def install(tf: ModuleType, defaults: DataDefaults) -> str | None:
    """Give every pipeline ``defaults``; None when installed, else why not (a warning)."""
    owner = _dataset_class(tf)
    if owner is None:
        return (
            f"tf.data defaults ({defaults.describe()}) not applied: TensorFlow "
            f"{getattr(tf, '__version__', '?')} has no Dataset.{HOOK}, where tfboot injects "
            "them; set tf.data.Options in the pipeline instead"
        )
    ours = _fields(defaults)
    original = vars(owner)[HOOK]
    if getattr(original, "tfboot_defaults", None) is not None:
        original = original.tfboot_original  # applied again in this process: replace ours

    def with_defaults(self: Any) -> Any:
        dataset = original(self)
        filling = _filling(tf, _own_options(tf, dataset), ours)
        return dataset if filling is None else dataset.with_options(filling)

    with_defaults.tfboot_defaults = ours  # type: ignore[attr-defined]
    with_defaults.tfboot_original = original  # type: ignore[attr-defined]
    setattr(owner, HOOK, with_defaults)
    return None

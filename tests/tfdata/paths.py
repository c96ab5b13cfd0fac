"""Run in a fresh process: each path by which TensorFlow runs a dataset, and the options it
actually runs with, read from the dataset's graph by TensorFlow's ``GetOptions`` op.

A recorder on top of tfboot's wrappers keeps the variant tensor of each dataset a path
runs; ``GetOptions`` on it gives the options TensorFlow runs with (inside a ``tf.function``
the function returns it). Prints one JSON line: path -> (ram_budget, cpu_budget,
initial_parallelism), None for a field that is not set.
"""

import json
import sys
import tempfile

import tensorflow as tf
from tensorflow.core.framework import dataset_options_pb2
from tensorflow.python.data.ops import dataset_ops
from tensorflow.python.ops import gen_dataset_ops

ran: list = []  # the variant tensor of each dataset a consumer ran, last last
inner = dataset_ops.DatasetV2._apply_debug_options


def record(self):  # type: ignore[no-untyped-def]
    dataset = inner(self)
    ran.append(dataset._variant_tensor)
    return dataset


dataset_ops.DatasetV2._apply_debug_options = record
single = gen_dataset_ops.dataset_to_single_element


def record_single(variant, **kwargs):  # type: ignore[no-untyped-def]
    ran.append(variant)
    return single(variant, **kwargs)


gen_dataset_ops.dataset_to_single_element = record_single


def options(serialized: bytes) -> list:
    tune = dataset_options_pb2.Options.FromString(serialized).autotune_options
    return [
        getattr(tune, name) if tune.WhichOneof(f"optional_{name}") else None
        for name in ("ram_budget", "cpu_budget", "initial_parallelism")
    ]


def last() -> list:
    return options(gen_dataset_ops.get_options(ran[-1]).numpy())


def pipeline(own: bool = False) -> tf.data.Dataset:
    ds = tf.data.Dataset.range(16).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE)
    if own:
        mine = tf.data.Options()
        mine.autotune.cpu_budget = 7
        ds = ds.with_options(mine)
    return ds


@tf.function
def argument(ds: tf.data.Dataset) -> tuple:
    total = tf.constant(0, tf.int64)
    for x in ds:
        total += x
    return total, gen_dataset_ops.get_options(ran[-1])


@tf.function
def single_in_graph(ds: tf.data.Dataset) -> tuple:
    value = ds.batch(16).get_single_element()
    return value, gen_dataset_ops.get_options(ran[-1])


seen: dict[str, list] = {}
for own in (False, True):
    suffix = " (own cpu_budget)" if own else ""
    for _ in pipeline(own):
        pass
    seen["loop" + suffix] = last()
    pipeline(own).reduce(tf.constant(0, tf.int64), lambda a, b: a + b)
    seen["reduce" + suffix] = last()
    pipeline(own).batch(16).get_single_element()
    seen["get_single_element" + suffix] = last()
    seen["tf.function argument" + suffix] = options(argument(pipeline(own))[1].numpy())
    seen["get_single_element in a tf.function" + suffix] = options(
        single_in_graph(pipeline(own))[1].numpy()
    )
    with tempfile.TemporaryDirectory() as folder:
        pipeline(own).save(folder)
    seen["save" + suffix] = last()
print(json.dumps(seen), file=sys.stdout, flush=True)

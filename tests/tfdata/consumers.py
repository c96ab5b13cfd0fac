"""Run in a fresh process: every way a dataset is iterated, recording the options in force.

A recorder wraps ``DatasetV2._apply_debug_options`` on top of tfboot's own wrapper, so it
sees the dataset each consumer is handed and then runs (not a copy). Prints one JSON line:
consumer -> the (ram_budget, cpu_budget, initial_parallelism) of each dataset it ran.
"""

import json
import sys

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops

seen: dict[str, list[tuple[int | None, int | None, int | None]]] = {}
where = ["import"]
inner = dataset_ops.DatasetV2._apply_debug_options


def record(self):  # type: ignore[no-untyped-def]
    dataset = inner(self)
    options = dataset.options() if tf.executing_eagerly() else dataset._options_attr
    tune = options.autotune
    seen.setdefault(where[0], []).append(
        (tune.ram_budget, tune.cpu_budget, getattr(tune, "initial_parallelism", None))
    )
    return dataset


dataset_ops.DatasetV2._apply_debug_options = record


def pipeline() -> tf.data.Dataset:
    x = tf.random.stateless_uniform([64, 4], seed=[1, 2])
    y = tf.cast(tf.reduce_sum(x, axis=1) > 2, tf.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(64, seed=0)
    return ds.map(lambda a, b: (a * 2, b), num_parallel_calls=tf.data.AUTOTUNE).batch(8)


def consumer(name: str):  # type: ignore[no-untyped-def]
    def mark(run):  # type: ignore[no-untyped-def]
        where[0] = name
        run()
        return run

    return mark


@consumer("loop")
def _loop() -> None:
    for _ in pipeline():
        pass


model = tf.keras.Sequential([tf.keras.layers.Input((4,)), tf.keras.layers.Dense(1)])
model.compile("sgd", "mse")


@consumer("fit")
def _fit() -> None:
    model.fit(pipeline().prefetch(tf.data.AUTOTUNE), epochs=1, verbose=0)


@consumer("evaluate")
def _evaluate() -> None:
    model.evaluate(pipeline(), verbose=0)


@consumer("predict")
def _predict() -> None:
    model.predict(pipeline().map(lambda a, b: a), verbose=0)


strategy = tf.distribute.MirroredStrategy(["/cpu:0"])


@consumer("experimental_distribute_dataset")
def _distribute() -> None:
    for _ in strategy.experimental_distribute_dataset(pipeline()):
        pass


@consumer("distribute_datasets_from_function")
def _from_function() -> None:
    for _ in strategy.distribute_datasets_from_function(lambda _context: pipeline()):
        pass


@consumer("tf.function")
def _traced() -> None:
    dataset = pipeline()

    @tf.function
    def total() -> tf.Tensor:
        s = tf.constant(0.0)
        for a, _b in dataset:
            s += tf.reduce_sum(a)
        return s

    total()


@consumer("own options")
def _own() -> None:
    options = tf.data.Options()
    options.autotune.cpu_budget = 7
    for _ in pipeline().with_options(options):
        pass


where[0] = "done"
print(json.dumps(seen), file=sys.stdout, flush=True)

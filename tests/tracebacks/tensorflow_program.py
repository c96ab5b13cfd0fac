"""A TensorFlow program whose own code raises through tfboot's wrappers: a tf.data map
function at trace time and as each consumer runs the pipeline (a loop,
``get_single_element``, a ``tf.function``), a ``tf.function`` given a dataset, and a wrong
argument to ``connect_to_cluster`` (a wait the peer watcher brackets). Prints what each
error shows (``shown.report``)."""

import tensorflow as tf
from shown import report
from tensorflow.python.eager import remote


def boom(x: object) -> object:
    raise ValueError("the map function's own error")


def mapped() -> tf.data.Dataset:
    return tf.data.Dataset.range(2).map(lambda x: tf.py_function(boom, [x], tf.int64))


def loop() -> None:
    for _ in mapped():
        pass


@tf.function
def reduced(dataset: tf.data.Dataset) -> object:
    return dataset.reduce(tf.constant(0, tf.int64), lambda total, x: total + x)


@tf.function
def raising(dataset: tf.data.Dataset) -> object:
    raise ValueError("the function's own error")


if __name__ == "__main__":
    report({
        "map at trace": lambda: tf.data.Dataset.range(2).map(boom),
        "map in a loop": loop,
        "map in get_single_element": lambda: mapped().take(1).get_single_element(),
        "map in a tf.function": lambda: reduced(mapped()),
        "a tf.function given a dataset": lambda: raising(mapped()),
        "connect_to_cluster": lambda: remote.connect_to_cluster(42),
    })  # fmt: skip

"""What an injected container sees (printed as one JSON line): the budget read back from
TensorFlow, the image's own sitecustomize and PYTHONPATH, the copy of tfboot that ran, and
the same in a ``spawn`` child."""

import json
import multiprocessing as mp
import sys


def facts() -> dict:
    import applib  # only on the image's PYTHONPATH

    tfboot = sys.modules.get("tfboot")
    return {
        "applib": applib.NAME,
        "image_sitecustomize": getattr(sys, "app_sitecustomize_ran", False),
        "tfboot": getattr(tfboot, "__file__", None),
        "injected": list(getattr(tfboot, "INJECTED", ()) or ()),
    }


if __name__ == "__main__":
    import tensorflow as tf

    found = facts()
    found["intra"] = tf.config.threading.get_intra_op_parallelism_threads()
    found["inter"] = tf.config.threading.get_inter_op_parallelism_threads()
    with mp.get_context("spawn").Pool(1) as pool:
        found["spawn_child"] = pool.apply(facts)
    print(json.dumps(found))

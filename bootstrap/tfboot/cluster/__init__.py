"""Multi-worker clusters: each task's ``TF_CONFIG``, built or checked at ``import tensorflow``.

Only the variable names live here, so the settings and the ``.env`` reader know them;
the modules that read them load only when ``DISTRIBUTED`` is not ``off``.
"""

# The variables read only when DISTRIBUTED is not off (DISTRIBUTED itself is in the contract).
NAMES = (
    "DIST_TASKS",
    "DIST_HOSTS",
    "DIST_TASK_TYPE",
    "DIST_TASK_INDEX",
    "DIST_PORT",
    "DIST_REPLICAS_PER_WORKER",
    "DIST_STARTUP_TIMEOUT",
    "DIST_TERM_GRACE",
)
MODES = ("off", "auto", "k8s", "slurm")
# TensorFlow's task types, in the order Slurm ranks fill them.
TASK_TYPES = ("chief", "worker", "ps", "evaluator")

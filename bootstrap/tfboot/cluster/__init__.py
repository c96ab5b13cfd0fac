"""Multi-worker clusters: each task's job, built or checked at the framework's import.

Only the variable names and the modes live here, so the settings and the ``.env`` reader
know them; the modules that read them load only when ``DISTRIBUTED`` is not ``off``. The
modes are the engines' files (``engines/``), listed, not imported. The runs the
launchers name are here too (``RUNS``, each engine's ``run`` one of them): the usage report
groups a job's processes by them whatever ``DISTRIBUTED`` is, and loads no cluster code for
it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

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
ENGINES = os.path.join(os.path.dirname(__file__), "engines")
# off, auto, and one mode per engine: each engine's module is named for its mode
MODES = ("off", "auto", *sorted(name[:-3] for name in os.listdir(ENGINES)
                                if name.endswith(".py") and name != "__init__.py"))  # fmt: skip
# TensorFlow's task types, in the order Slurm ranks fill them.
TASK_TYPES = ("chief", "worker", "ps", "evaluator")

TORCHRUN = "TORCHELASTIC_RUN_ID"  # set by torchrun (torch.distributed.run) for its workers


@dataclass(frozen=True)
class Run:
    """A run a launcher names for processes that share no parent: the variables that name
    it (all set, or no such run), and the one whose value is 0 (or unset) in the process
    that leads it."""

    prefix: str
    names: tuple[str, ...]
    rank: str

    def of(self, env: Mapping[str, str]) -> tuple[str, bool] | None:
        """This process's run (its id, whether this process leads), or None: not this run."""
        values = [env.get(name, "").strip() for name in self.names]
        if not all(values):
            return None
        lead = env.get(self.rank, "0").strip() in ("", "0")
        return f"{self.prefix}{'.'.join(values)[:100]}", lead


MPIRUN_RUN = Run("mpirun-", ("PMIX_NAMESPACE", "OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_RANK")
SLURM_RUN = Run("slurm-", ("SLURM_JOB_ID", "SLURM_STEP_ID"), "SLURM_PROCID")
# An mpirun's ranks (rank 0 leads; first: mpirun in a Slurm job starts them through Slurm),
# a Slurm step's tasks (task 0 leads), a torchrun's ranks (rank 0 leads), in that order.
RUNS = (MPIRUN_RUN, SLURM_RUN, Run("torchrun-", (TORCHRUN,), "RANK"))

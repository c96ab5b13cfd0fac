"""How long a Slurm step takes to end after it loses a task, with and without tfboot acting.

Starts the test cluster (``tests/slurm/cluster.sh``: node9, node10, node11), then runs
``srun -N2 -n3 --kill-on-bad-exit=1`` on ``tests/slurm/train_until_killed.py`` again and
again: rank 2 exits with status 1 (``--how kill``: SIGKILL) after training step
``--kill-step`` (-1: before the group forms, while the others wait for it in TensorFlow's
C++), and srun sends SIGTERM to the step. Side by side, alternating:
``DIST_TERM_GRACE=3`` (tfboot's watcher kills a task still running 3 s after the SIGTERM)
and ``DIST_TERM_GRACE=3600`` (the watcher waits past Slurm's ``KillWait`` of 30 s, as
before it acted). Prints each run's seconds from the loss
to the end of the step.

Usage (root; Debian's Slurm and munge installed):
    python bench/slurm_term.py [--runs N] [--kill-step S] [--how exit|kill]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "tests" / "slurm" / "cluster.sh"
SCRIPT = REPO / "tests" / "slurm" / "train_until_killed.py"


def one_run(conf: str, folder: Path, grace: int, step: int, how: str) -> tuple[float, int]:
    """Seconds from the loss of rank 2 to srun's exit, and srun's exit status."""
    folder.mkdir()
    env = {
        **os.environ,
        "SLURM_CONF": conf,
        "DISTRIBUTED": "slurm",
        "KILL_RANK": "2",
        "DIST_TERM_GRACE": str(grace),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "KILL_STEP": str(step),
        "KILL_HOW": how,
    }
    command = [
        "srun",
        "-N2",
        "-n3",
        "--kill-on-bad-exit=1",
        f"--output={folder}/task-%t.out",
        f"--error={folder}/task-%t.err",
        sys.executable,
        str(SCRIPT),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    ended = time.time()
    lines = (folder / "task-2.out").read_text().splitlines()
    lost = float(next(line for line in lines if " lost at " in line).rsplit(" ", 1)[1])
    return ended - lost, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each case")
    parser.add_argument(
        "--kill-step",
        type=int,
        default=3,
        help="the training step after which rank 2 is lost; -1: before the group forms",
    )
    parser.add_argument(
        "--how",
        choices=("exit", "kill"),
        default="exit",
        help="how rank 2 is lost: exit status 1 (an error), or SIGKILL (a lost node)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["bash", str(CLUSTER), "up", tmp], check=True)
        try:
            times: dict[int, list[float]] = {3: [], 3600: []}
            for run in range(args.runs):
                for grace in times:
                    took, status = one_run(
                        f"{tmp}/slurm.conf",
                        Path(tmp, f"{grace}-{run}"),
                        grace,
                        args.kill_step,
                        args.how,
                    )
                    times[grace].append(took)
                    print(
                        f"run {run + 1}: DIST_TERM_GRACE={grace}: step ended {took:.1f} s "
                        f"after the loss (srun exit {status})",
                        flush=True,
                    )
        finally:
            subprocess.run(["bash", str(CLUSTER), "down", tmp], check=False)
    for grace, seconds in times.items():
        print(
            f"DIST_TERM_GRACE={grace}: median {statistics.median(seconds):.1f} s, "
            f"max {max(seconds):.1f} s, min {min(seconds):.1f} s over {len(seconds)} runs"
        )
    ratio = statistics.median(times[3600]) / statistics.median(times[3])
    print(f"the step ends {ratio:.1f}x sooner with tfboot's watcher acting on SIGTERM")


if __name__ == "__main__":
    main()

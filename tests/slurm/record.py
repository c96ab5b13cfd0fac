"""Record the ``SLURM_*`` variables real ``srun``, ``sbatch`` and ``salloc`` give each task.

``python tests/slurm/record.py`` starts the test cluster (``cluster.sh``: nodes node9,
node10 and node11, each in its own network namespace), runs each layout below, and writes
one JSON file per layout under ``tests/testdata/slurm/``: the command and every task's
variables, by rank. ``tests/cluster/test_slurm_recorded.py`` replays them through the
builder. Paths of the recording machine (``SLURM_CONF``, ``SLURM_SUBMIT_DIR``,
``SLURM_HOSTFILE``) are left out, and the submit host is called ``login``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "testdata" / "slurm"
DUMP = (
    "import json, os; print(json.dumps({k: v for k, v in sorted(os.environ.items()) "
    "if k.startswith(('SLURM_', 'SLURMD_'))}))"
)
# Paths and the name of the recording machine are not kept; the submit host is "login".
LEFT_OUT = ("SLURM_CONF", "SLURM_SUBMIT_DIR", "SLURM_HOSTFILE")
SUBMIT_HOST = "login"
# name -> the srun options of the step (sbatch and salloc cases are written out below).
STEPS = {
    "srun-N2-n3": ["-N2", "-n3"],
    "srun-N3-n6": ["-N3", "-n6"],
    "srun-N3-n4": ["-N3", "-n4"],
    "srun-N2-ntasks-per-node-2": ["-N2", "--ntasks-per-node=2"],
    "srun-w-node10-node9-n2": ["-w", "node10,node9", "-n2"],
    "srun-N2-n3-cyclic": ["-N2", "-n3", "--distribution=cyclic"],
    "srun-N3-n5-cyclic-block": ["-N3", "-n5", "--distribution=cyclic:block"],
    "srun-N2-n3-plane-2": ["-N2", "-n3", "--distribution=plane=2"],
    "srun-N2-n4-plane-1": ["-N2", "-n4", "--distribution=plane=1"],
    "srun-n3-arbitrary": ["-n3", "--distribution=arbitrary"],
}


def tasks(output: str) -> list[dict[str, str]]:
    found = [
        {
            k: SUBMIT_HOST if k == "SLURM_SUBMIT_HOST" else v
            for k, v in entry.items()
            if k not in LEFT_OUT
        }
        for entry in map(json.loads, (line for line in output.splitlines() if line.startswith("{")))
    ]
    return sorted(found, key=lambda e: int(e.get("SLURM_PROCID", "0")))


def per_task(folder: Path, stem: str) -> str:
    """The outputs of a step run with ``--output=folder/stem-%t.out``, one task per file."""
    return "\n".join(p.read_text() for p in sorted(folder.glob(f"{stem}-*.out")))


def record(name: str, command: list[str], found: list[dict[str, str]]) -> None:
    shown = ["python" if part == sys.executable else part for part in command]
    text = json.dumps({"command": " ".join(shown), "tasks": found}, indent=1, sort_keys=True)
    (OUT / f"{name}.json").write_text(text + "\n")
    print(f"{name}: {len(found)} task(s)")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["bash", str(HERE / "cluster.sh"), "up", tmp], check=True)
        os.environ["SLURM_CONF"] = f"{tmp}/slurm.conf"
        folder = Path(tmp)
        dump = f'{sys.executable} -c "{DUMP}"'
        try:
            (folder / "hosts").write_text("node10\nnode9\nnode10\n")
            arbitrary = {**os.environ, "SLURM_HOSTFILE": str(folder / "hosts")}
            for name, options in STEPS.items():
                command = ["srun", *options, sys.executable, "-c", DUMP]
                output = f"--output={tmp}/{name}-%t.out"  # one file per task: lines never mix
                env = arbitrary if "arbitrary" in name else None
                subprocess.run([command[0], output, *command[1:]], check=True, timeout=60, env=env)
                record(name, command, tasks(per_task(folder, name)))
            script = folder / "job.sh"
            script.write_text(f"#!/bin/bash\n{dump}\nsrun --output={tmp}/batch-%t.out {dump}\n")
            job = ["sbatch", "--nodes=2", "--ntasks=3"]
            run = [*job, "--wait", f"--output={tmp}/job.out", str(script)]
            subprocess.run(run, check=True, capture_output=True, timeout=120)
            record("sbatch-N2-n3-batch-step", job, tasks((folder / "job.out").read_text()))
            record("sbatch-N2-n3-srun-step", [*job, "srun"], tasks(per_task(folder, "batch")))
            shell = f"{dump}; srun --output={tmp}/alloc-%t.out {dump}"
            alloc = ["salloc", "-N2", "-n3"]
            done = subprocess.run(
                [*alloc, "bash", "-c", shell],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            record("salloc-N2-n3-shell", alloc, tasks(done.stdout))
            record("salloc-N2-n3-srun-step", [*alloc, "srun"], tasks(per_task(folder, "alloc")))
        finally:
            subprocess.run(["bash", str(HERE / "cluster.sh"), "down", tmp], check=False)


if __name__ == "__main__":
    main()

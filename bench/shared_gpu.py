"""Several TensorFlow jobs at once on one 16 GiB simulated GPU, under tfboot's memory settings.

N jobs (default 4) start together on one simulated device whose accounting is shared
between processes (``tests/simgpu``), as a CUDA GPU's memory is. Each job places
float32 tensors on GPU:0, 256 MiB at a time, until it holds what it needs (default
3584 MiB, so all of them fit on the device together), waits until every job has got that
far, does a little work and exits. Four cases, one run: no configuration,
``MEMORY_LIMIT_MB`` set to a fair share (device / N), ``MEMORY_GROWTH=true``, and both.
Per case: jobs finished, jobs out of memory, the device memory each job held and all of
them together (peaks, from the shared accounting), and wall time.

TensorFlow 2.21 ignores caps on pluggable devices, so the two cap cases run on the
pinned tf-nightly-cpu with the test-only shim (``tests/simgpu/README.md``); the others
on TensorFlow 2.21. These are simulated-device figures: the pool is TensorFlow's own
pluggable-device sizing, and a real GPU also spends memory on the CUDA context and
libraries, outside TensorFlow's pool.

Run: ``.venv/bin/python bench/shared_gpu.py [--png shared_gpu.png]`` (needs tfboot in
``.venv`` and ``.venv-nightly``; ``--png`` needs matplotlib).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from simgpu.build import build_plugin
from simgpu.jobs import Together, run_together
from simgpu.scenarios import MIB, NIGHTLY_PYTHON, STABLE_PYTHON, SimGpu, venvs_problem
from tables import print_table

HEADER = (
    "setting",
    "TensorFlow",
    "finished",
    "out of memory",
    "held per job (MiB)",
    "held in total (MiB)",
    "wall s",
)


@dataclass
class Case:
    """One setting: its label, tfboot's variables, and whether it needs the nightly."""

    label: str
    env: dict[str, str]
    nightly: bool


@dataclass
class Outcome:
    """A case's result: the jobs' runs and the device's accounting."""

    case: Case
    together: Together

    def per_job_mb(self) -> list[tuple[int, bool]]:
        """(peak MiB held, ran out of memory) per job, largest first."""
        jobs = [
            (self.together.holder(run).peak // MIB, bool(run.output["oom"]))
            for run in self.together.runs
        ]
        return sorted(jobs, reverse=True)

    def row(self) -> tuple[str, ...]:
        shim = " + shim" if self.case.nightly else ""
        return (
            self.case.label,
            f"{self.together.runs[0].output['tf']}{shim}",
            str(self.together.finished),
            str(self.together.oom),
            " / ".join(str(mb) for mb, _ in self.per_job_mb()),
            str(self.together.final.peak // MIB),
            f"{self.together.wall_s:.1f}",
        )


def cases(jobs: int, device_mb: int) -> list[Case]:
    """The four settings, with the cap a fair share of the device."""
    share = str(device_mb // jobs)
    return [
        Case("no configuration", {}, nightly=False),
        Case(f"MEMORY_LIMIT_MB={share}", {"MEMORY_LIMIT_MB": share}, nightly=True),
        Case("MEMORY_GROWTH=true", {"MEMORY_GROWTH": "true"}, nightly=False),
        Case(
            f"MEMORY_LIMIT_MB={share} MEMORY_GROWTH=true",
            {"MEMORY_LIMIT_MB": share, "MEMORY_GROWTH": "true"},
            nightly=True,
        ),
    ]


def run_case(case: Case, workdir: Path, args: argparse.Namespace) -> Outcome:
    """Run every job of ``case`` at once on a fresh simulated device."""
    python = NIGHTLY_PYTHON if case.nightly else STABLE_PYTHON
    gpu = SimGpu(python, build_plugin(python), workdir, shim=case.nightly)
    try:
        together = run_together(
            gpu,
            args.jobs,
            case.env,
            need_mb=args.need_mb,
            step_mb=args.step_mb,
            memory_mb=args.device_mb,
        )
    finally:
        gpu.close()
    for run in together.runs:
        if not run.ok:
            raise SystemExit(f"{case.label}: a job failed ({run.proc.returncode}):\n{run.stderr}")
    return Outcome(case, together)


def print_results(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    print(
        f"{args.jobs} jobs, each needing {args.need_mb} MiB (in {args.step_mb} MiB tensors), "
        f"at once on one {args.device_mb} MiB simulated GPU (simulated-device figures; "
        "cap cases on the pinned nightly with the test-only shim)\n"
    )
    print_table(HEADER, [outcome.row() for outcome in outcomes])


def write_png(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    """Stacked bars: what each job held, green if it finished, red if it ran out of memory."""
    from charts import pyplot, save

    plt = pyplot()
    figure, axes = plt.subplots(figsize=(7.5, 4))
    for x, outcome in enumerate(outcomes):
        bottom = 0
        for mb, oom in outcome.per_job_mb():
            color = "#d9534f" if oom else "#5cb85c"
            axes.bar(x, mb / 1024, bottom=bottom / 1024, color=color, edgecolor="white")
            bottom += mb
        label = f"{outcome.together.finished} finished\n{outcome.together.oom} OOM"
        axes.text(x, bottom / 1024 + 0.3, label, ha="center", va="bottom", fontsize=9)
    axes.axhline(args.device_mb / 1024, color="black", linestyle="--", linewidth=1)
    axes.set_xticks(range(len(outcomes)))
    axes.set_xticklabels([o.case.label.replace(" MEMORY", "\nMEMORY") for o in outcomes])
    axes.tick_params(axis="x", labelsize=8)
    axes.set_ylabel("device memory held (GiB)")
    axes.set_ylim(0, args.device_mb / 1024 * 1.35)
    axes.set_title(
        f"{args.jobs} jobs needing {args.need_mb / 1024:g} GiB each on one "
        f"{args.device_mb / 1024:g} GiB simulated GPU\n"
        "(bar segments: one per job; green finished, red out of memory; dashed: device)",
        fontsize=10,
    )
    save(figure, args.png)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--device-mb", type=int, default=16384)
    parser.add_argument("--need-mb", type=int, default=3584, help="memory each job needs")
    parser.add_argument("--step-mb", type=int, default=256, help="size of each tensor")
    parser.add_argument("--png", type=Path, help="also write a chart there (needs matplotlib)")
    args = parser.parse_args()
    problem = venvs_problem(STABLE_PYTHON, NIGHTLY_PYTHON)
    if problem is not None:
        print(f"shared_gpu: {problem}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as workdir:
        outcomes = []
        for case in cases(args.jobs, args.device_mb):
            outcomes.append(run_case(case, Path(workdir), args))
            print(f"  {case.label}: done", file=sys.stderr)
    print_results(outcomes, args)
    if args.png:
        write_png(outcomes, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Start-up cost of tfboot, measured side by side in one run.

Compares this environment, with tfboot installed, and a hard-linked twin of it that
differs only in lacking tfboot.pth (so start-up sees the same files everywhere else):

  1. `python -c pass` with no tfboot variable set, and with variables set;
  2. `import tensorflow` timed inside the process, with tfboot applying a configuration
     and without tfboot.

Runs alternate between the two environments so drift affects both alike; medians and
their ratio are printed. With ``--instructions``, it instead counts the instructions of
`python -c pass` under callgrind (exact and repeatable) in the twin, with each candidate
``tfboot.pth`` in turn. Usage: python bench/startup.py [--runs N] [--tf-runs N]
[--instructions]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

SET = {"MEMORY_LIMIT_MB": "6144", "VIRTUAL_SPLIT": "2", "MEMORY_GROWTH": "true"}
TIMED_IMPORT = (
    "import time; t = time.perf_counter(); import tensorflow; print(time.perf_counter() - t)"
)


def twin_without_tfboot(root: Path) -> Path:
    """A hard-linked copy of this environment, identical but for tfboot.pth."""
    prefix = Path(sys.prefix)
    shutil.copytree(prefix, root, symlinks=True, copy_function=os.link)
    purelib = Path(sysconfig.get_paths()["purelib"])
    (root / purelib.relative_to(prefix) / "tfboot.pth").unlink()
    return root / Path(sys.executable).relative_to(prefix)


# What tfboot.pth may hold; the installed package and its tfboot.pth are the release's.
PTH_CANDIDATES = {
    "(no file)": None,
    "unguarded": "import tfboot",
    "exec guard": 'import sys;exec("try:import tfboot\\nexcept:0")',
    "sitedir guard": 'import os;os.path.isdir(sitedir+"/tfboot")and __import__("tfboot")',
}


def instructions(python: str, env: dict[str, str], code: str = "pass") -> int:
    """Instructions of `python -c CODE`, counted by callgrind."""
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", python, "-c", code],
        env={**env, "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=True,
    )
    return int(re.search(r"Collected : (\d+)", run.stderr).group(1))


def count_candidates(root: Path, twin: str, env: dict[str, str]) -> None:
    """Each candidate tfboot.pth in the twin at ``root``, then the release's, under callgrind."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    pth = root / purelib.relative_to(sys.prefix) / "tfboot.pth"
    release = (purelib / "tfboot.pth").read_text().strip()
    rows = []
    for label, line in [*PTH_CANDIDATES.items(), ("this release", release)]:
        pth.unlink(missing_ok=True)  # never write through a hard link
        if line is not None:
            pth.write_text(line + "\n")
        rows.append((label, line, instructions(twin, env)))
    base = rows[0][2]
    print(f"python {sys.version.split()[0]}; instructions of `python -c pass`")
    for label, line, count in rows:
        print(f"{label:<14} {count / 1e6:>8.3f} M  {count / base - 1:>+7.2%}  {line or ''}")
    count_watched(root / purelib.relative_to(sys.prefix) / "tfboot" / "__init__.py", twin, env)


# The previous release's form: the five watched names as a tuple, before the start-up
# table mapped each one to its adapter.
EARLIER_WATCHED = 'FRAMEWORKS = ("tensorflow", "keras", "tf_keras", "jax", "torch")'
# Code whose every import passes through the trampoline: about a hundred modules.
MANY_IMPORTS = "import asyncio, email.parser, http.client, json, logging"


def count_watched(init: Path, twin: str, env: dict[str, str]) -> None:
    """The trampoline with this release's table and with the previous release's tuple."""
    release = init.read_text()
    earlier = re.sub(r"^FRAMEWORKS = \{.*?^\}$", EARLIER_WATCHED, release, flags=re.M | re.S)
    assert earlier != release, "the FRAMEWORKS table was not found"
    counts = {}
    for label, text in (("names as tuple", earlier), ("this release", release)):
        init.unlink()  # never write through a hard link
        init.write_text(text)
        # Its bytecode, written once (PYTHONDONTWRITEBYTECODE would make every run compile).
        writing = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
        subprocess.run([twin, "-c", "pass"], env=writing, check=True)
        counts[label] = [instructions(twin, env, code) for code in ("pass", MANY_IMPORTS)]
    print("the trampoline's watched names, a tuple or the table; instructions of "
          f"`python -c pass` and of `python -c '{MANY_IMPORTS}'`")  # fmt: skip
    (pass_a, many_a), (pass_b, many_b) = counts.values()
    for label, (one, many) in counts.items():
        print(f"{label:<14} {one / 1e6:>8.3f} M  {many / 1e6:>8.3f} M")
    print(f"{'difference':<14} {pass_b / pass_a - 1:>+8.3%}  {many_b / many_a - 1:>+8.3%}")


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFBOOT_") and k not in SET}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["TFBOOT_LOG"] = "quiet"
    env.update(extra)
    return env


def wall(python: str, code: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([python, "-c", code], env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def inner(python: str, env: dict[str, str]) -> float:
    run = subprocess.run(
        [python, "-c", TIMED_IMPORT], env=env, check=True, capture_output=True, text=True
    )
    return float(run.stdout.strip().splitlines()[-1])


def side_by_side(label: str, runs: int, measure_with, measure_without) -> tuple[str, float, float]:
    with_times, without_times = [], []
    for _ in range(runs):
        with_times.append(measure_with())
        without_times.append(measure_without())
    a, b = statistics.median(with_times), statistics.median(without_times)
    return label, a, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="runs of python -c pass per case")
    parser.add_argument("--tf-runs", type=int, default=12, help="runs of import tensorflow")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions of candidate .pth files"
    )
    args = parser.parse_args()
    ours = sys.executable
    # The twin is made beside this environment: hard links need the same file system.
    with tempfile.TemporaryDirectory(dir=Path(sys.prefix).parent) as tmp:
        twin = str(twin_without_tfboot(Path(tmp) / "twin"))
        unset, configured = clean_env({}), clean_env(SET)
        if args.instructions:
            count_candidates(Path(tmp) / "twin", twin, unset)
            return
        rows = [
            side_by_side(
                "python -c pass, no variable set",
                args.runs,
                lambda: wall(ours, "pass", unset),
                lambda: wall(twin, "pass", unset),
            ),
            side_by_side(
                "python -c pass, variables set",
                args.runs,
                lambda: wall(ours, "pass", configured),
                lambda: wall(twin, "pass", configured),
            ),
            side_by_side(
                "import tensorflow (in-process), applying",
                args.tf_runs,
                lambda: inner(ours, configured),
                lambda: inner(twin, configured),
            ),
        ]
    print(f"python {sys.version.split()[0]}; variables set: {SET}")
    print(f"{'case':<42} {'with tfboot':>12} {'without':>12} {'ratio':>7}")
    for label, a, b in rows:
        unit, scale = ("ms", 1e3) if a < 1 else ("s", 1)
        print(f"{label:<42} {a * scale:>9.3f} {unit:<2} {b * scale:>9.3f} {unit:<2} {a / b:>6.3f}x")


if __name__ == "__main__":
    main()

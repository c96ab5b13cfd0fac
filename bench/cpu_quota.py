"""Training-step speed under a container CPU quota: tfboot's CPU_THREADS=auto vs TF's default.

TensorFlow sizes its intra-op pool from the CPUs it may be scheduled on, not from the
container's CFS quota, so under ``docker run --cpus=N`` it runs more threads than the quota
pays for and the kernel throttles them. tfboot's ``CPU_THREADS=auto`` (its default) sizes
the pool from the quota instead; ``CPU_THREADS=host`` keeps TensorFlow's default.

The big-node case is the one users meet: a container limited to ``--node-cpus`` (2) on a
node with many cores, where TensorFlow's default is one thread per core of the node. It is
emulated here by giving TensorFlow that many threads (``TF_NUM_INTRAOP_THREADS`` and
``TF_NUM_INTEROP_THREADS`` set to 16, 32 and 64: ``--node-threads``) under the same quota,
next to tfboot's ``auto``.

For each quota, one fresh container per setting runs the same small Keras-style training
step (a 3-layer MLP, forward and backward, in a ``tf.function``), first ``--warmup`` steps
untimed, then ``--steps`` timed ones. Settings alternate within each round, and the table
pools every round. Usage::

    python bench/cpu_quota.py                  # builds the test image if needed
    python bench/cpu_quota.py --image my/tfboot:tag --cpus 1 0.5 --rounds 3 --png cpu.png
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Runs inside the container. Prints one JSON line: per-step times and the intra-op pool
# size TensorFlow created (threads that appear at runtime start and are not named tf_*).
WORKLOAD = """
import json, os, sys, time
import tensorflow as tf
steps, warmup, width, batch = (int(a) for a in sys.argv[1:5])
def threads():
    return {t: open(f'/proc/self/task/{t}/comm').read().strip()
            for t in os.listdir('/proc/self/task')}
before = threads()
tf.random.set_seed(0)
x = tf.random.normal((batch, width))
y = tf.random.normal((batch, 1))
layers = [tf.Variable(tf.random.normal((a, b), stddev=0.05))
          for a, b in ((width, width), (width, width), (width, 1))]
opt = tf.keras.optimizers.SGD(0.01)
@tf.function
def step():
    with tf.GradientTape() as tape:
        h = x
        for w in layers[:-1]:
            h = tf.nn.relu(h @ w)
        loss = tf.reduce_mean(tf.square(h @ layers[-1] - y))
    opt.apply_gradients(zip(tape.gradient(loss, layers), layers))
    return loss
def throttled():
    # CFS throttling so far: periods throttled and time throttled (ms); cgroup v1 or v2.
    for path, scale in (('/sys/fs/cgroup/cpu/cpu.stat', 1e-6), ('/sys/fs/cgroup/cpu.stat', 1e-3)):
        if os.path.exists(path):
            stat = dict(line.split() for line in open(path))
            used = stat.get('throttled_time', stat.get('throttled_usec', 0))
            return int(stat.get('nr_throttled', 0)), float(used) * scale
    return 0, 0.0
intra = sum(1 for t, n in threads().items() if t not in before and not n.startswith('tf_'))
for _ in range(warmup):
    step().numpy()
times = []
periods0, ms0 = throttled()
for _ in range(steps):
    t0 = time.perf_counter()
    step().numpy()
    times.append(time.perf_counter() - t0)
periods1, ms1 = throttled()
print(json.dumps({'times': times, 'intra_threads': intra,
                  'throttled_periods': periods1 - periods0, 'throttled_ms': ms1 - ms0}))
"""

AUTO = "tfboot auto"
SETTINGS = {
    AUTO: {},  # CPU_THREADS=auto is the default: nothing to set
    "TF default": {"CPU_THREADS": "host"},
}
Settings = Mapping[str, Mapping[str, str]]
Cell = tuple[int, float, str]  # (group, quota, setting)


def node_default(threads: int) -> dict[str, str]:
    """TensorFlow's default on a node of ``threads`` cores: that many threads in each pool."""
    count = str(threads)
    return {"CPU_THREADS": "host", "TF_NUM_INTRAOP_THREADS": count, "TF_NUM_INTEROP_THREADS": count}


def groups(args: argparse.Namespace) -> list[tuple[float, Settings]]:
    """(quota, settings compared under it): the ``--cpus`` quotas, then the big node."""
    planned: list[tuple[float, Settings]] = [(cpus, SETTINGS) for cpus in args.cpus]
    big = {AUTO: SETTINGS[AUTO]}
    for threads in args.node_threads:
        big[f"TF default, {threads}-core node"] = node_default(threads)
    if args.node_threads:
        planned += [(cpus, big) for cpus in args.node_cpus]
    return planned


@dataclass
class Sample:
    """Pooled step times of one (quota, setting) cell."""

    times: list[float]
    intra_threads: set[int]
    throttled_periods: int = 0
    throttled_ms: float = 0.0

    @property
    def steps_per_s(self) -> float:
        return len(self.times) / sum(self.times)

    @property
    def p99_ms(self) -> float:
        return quantile(self.times, 99) * 1e3

    @property
    def throttled_ms_per_s(self) -> float:
        return self.throttled_ms / sum(self.times)

    def row(self, cpus: float, setting: str) -> str:
        threads = ",".join(str(t) for t in sorted(self.intra_threads))
        return (
            f"| {cpus:g} | {setting} | {threads} | {self.steps_per_s:.1f} "
            f"| {quantile(self.times, 50) * 1e3:.1f} | {self.p99_ms:.1f} "
            f"| {self.throttled_periods} | {self.throttled_ms_per_s:.0f} |"
        )


def quantile(values: list[float], q: int) -> float:
    """The ``q``-th percentile of ``values``."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def run_once(image: str, cpus: float, env: Mapping[str, str], args: argparse.Namespace) -> dict:
    """One container: the workload under ``--cpus=cpus`` with ``env``."""
    cmd = ["docker", "run", "--rm", f"--cpus={cpus:g}", "-e", "TF_CPP_MIN_LOG_LEVEL=2"]
    for key, value in env.items():
        cmd += ["-e", f"{key}={value}"]
    workload = [str(args.steps), str(args.warmup), str(args.width), str(args.batch)]
    cmd += [image, "python3", "-c", WORKLOAD, *workload]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"container failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def default_image() -> str:
    """The tfboot image the container tests use, built (or found cached) on demand."""
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO / "tests" / "docker"))
    from image_builds import build_standin_base, build_tfboot_image

    return build_tfboot_image(build_standin_base())


def memory_arguments(parser: argparse.ArgumentParser, memory: str) -> None:
    """The image and the container's memory and CPUs, as the memory benchmarks take them."""
    parser.add_argument("--image", help="tfboot image to run (default: build the test image)")
    parser.add_argument("--memory", default=memory, help="docker run --memory (swap off)")
    parser.add_argument("--cpus", type=float, default=2.0)


def main() -> None:
    """Run every (quota, setting) cell and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", help="tfboot image to run (default: build the test image)")
    parser.add_argument("--cpus", type=float, nargs="+", default=[1.0, 0.5])
    parser.add_argument("--rounds", type=int, default=3, help="containers per cell")
    parser.add_argument("--steps", type=int, default=60, help="timed steps per container")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--width", type=int, default=1024, help="MLP width")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument(
        "--node-cpus", type=float, nargs="+", default=[2.0], help="quotas on the big node"
    )
    parser.add_argument(
        "--node-threads",
        type=int,
        nargs="*",
        default=[16, 32, 64],
        help="cores of the emulated big node (none: skip that case)",
    )
    parser.add_argument("--png", type=Path, help="also write a chart there (needs matplotlib)")
    args = parser.parse_args()
    image = args.image or default_image()

    cells: dict[Cell, Sample] = {}  # one per group and setting, in the order run
    for group, (cpus, settings) in enumerate(groups(args)):
        for round_ in range(args.rounds):
            order = list(settings) if round_ % 2 == 0 else list(reversed(settings))
            for setting in order:
                result = run_once(image, cpus, settings[setting], args)
                cell = cells.setdefault((group, cpus, setting), Sample([], set()))
                cell.times += result["times"]
                cell.intra_threads.add(result["intra_threads"])
                cell.throttled_periods += result["throttled_periods"]
                cell.throttled_ms += result["throttled_ms"]
                print(f"  --cpus={cpus:g} {setting}: round {round_ + 1} done", file=sys.stderr)

    print(
        f"image {image}; {args.rounds} containers x {args.steps} timed steps per cell; "
        f"MLP {args.width}x{args.width}x{args.width}x1, batch {args.batch}"
    )
    print(
        "| --cpus | threads setting | intra-op threads | steps/s | p50 ms | p99 ms "
        "| throttled periods | throttled ms per s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (_, cpus, setting), sample in cells.items():
        print(sample.row(cpus, setting))
    if args.png:
        write_png(cells, args.png)


def write_png(cells: dict[Cell, Sample], path: Path) -> None:
    """Steps/s, p99 and throttling per cell, tfboot's auto in green."""
    from charts import pyplot, save

    plt = pyplot()
    labels = [
        f"--cpus={cpus:g}\n{'tfboot auto' if setting == AUTO else 'TF default'}\n"
        f"{','.join(str(t) for t in sorted(sample.intra_threads))} threads"
        for (_, cpus, setting), sample in cells.items()
    ]
    colors = ["#5cb85c" if setting == AUTO else "#999999" for _, _, setting in cells]
    panels = (
        ("steps/s (higher is better)", lambda s: s.steps_per_s),
        ("p99 step time, ms (lower is better)", lambda s: s.p99_ms),
        ("throttled ms per s (lower is better)", lambda s: s.throttled_ms_per_s),
    )
    figure, axes = plt.subplots(len(panels), 1, figsize=(10, 7.5), sharex=True)
    for ax, (title, value) in zip(axes, panels, strict=False):
        ax.bar(range(len(cells)), [value(s) for s in cells.values()], color=colors)
        ax.set_title(title, fontsize=10)
    axes[-1].set_xticks(range(len(cells)))
    axes[-1].set_xticklabels(labels, fontsize=8)
    figure.suptitle("Training step under a CPU quota: tfboot auto (green) vs TensorFlow's default")
    save(figure, path)


if __name__ == "__main__":
    main()

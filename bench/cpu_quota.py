"""Training-step speed under a container CPU quota: tfboot's CPU_THREADS=auto vs TF's default.

TensorFlow sizes its intra-op pool from the CPUs it may be scheduled on, not from the
container's CFS quota, so under ``docker run --cpus=N`` it runs more threads than the quota
pays for and the kernel throttles them. tfboot's ``CPU_THREADS=auto`` (its default) sizes
the pool from the quota instead; ``CPU_THREADS=host`` keeps TensorFlow's default.

For each quota, one fresh container per setting runs the same small Keras-style training
step (a 3-layer MLP, forward and backward, in a ``tf.function``), first ``--warmup`` steps
untimed, then ``--steps`` timed ones. Settings alternate within each round, and the table
pools every round. Usage::

    python bench/cpu_quota.py                  # builds the test image if needed
    python bench/cpu_quota.py --image my/tfboot:tag --cpus 1 0.5 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
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

SETTINGS = {
    "tfboot auto": {},  # CPU_THREADS=auto is the default: nothing to set
    "TF default": {"CPU_THREADS": "host"},
}


@dataclass
class Sample:
    """Pooled step times of one (quota, setting) cell."""

    times: list[float]
    intra_threads: set[int]
    throttled_periods: int = 0
    throttled_ms: float = 0.0

    def row(self, cpus: float, setting: str) -> str:
        total = sum(self.times)
        p50, p99 = quantile(self.times, 50), quantile(self.times, 99)
        threads = ",".join(str(t) for t in sorted(self.intra_threads))
        return (
            f"| {cpus:g} | {setting} | {threads} | {len(self.times) / total:.1f} "
            f"| {p50 * 1e3:.1f} | {p99 * 1e3:.1f} | {self.throttled_periods} "
            f"| {self.throttled_ms / total:.0f} |"
        )


def quantile(values: list[float], q: int) -> float:
    """The ``q``-th percentile of ``values``."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def run_once(image: str, cpus: float, env: dict[str, str], args: argparse.Namespace) -> dict:
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
    args = parser.parse_args()
    image = args.image or default_image()

    cells: dict[tuple[float, str], Sample] = {}
    for cpus in args.cpus:
        for round_ in range(args.rounds):
            order = list(SETTINGS) if round_ % 2 == 0 else list(reversed(SETTINGS))
            for setting in order:
                result = run_once(image, cpus, SETTINGS[setting], args)
                cell = cells.setdefault((cpus, setting), Sample([], set()))
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
    for (cpus, setting), sample in cells.items():
        print(sample.row(cpus, setting))


if __name__ == "__main__":
    main()

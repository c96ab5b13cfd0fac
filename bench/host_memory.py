"""tf.data under a container memory limit: TensorFlow's defaults vs tfboot's auto.

TensorFlow sizes tf.data's autotuning from the host: half of the host's free memory as
the RAM budget, and the host's schedulable cores as the CPU budget. In a container with
``--memory`` and ``--cpus`` the autotuner then grows its buffers past the container's
limit, and the kernel's OOM killer ends the process. tfboot's ``HOST_MEMORY_LIMIT_MB=auto``
(its default) gives every pipeline a RAM budget measured from the room its working set
leaves under the container's limit, and the CPU quota as the CPU budget and initial
parallelism.

The workload is a realistic input pipeline feeding a small Keras model's ``fit``: large
decoded elements (``--mib`` MiB each, made by a parallel ``map`` with AUTOTUNE), shuffle,
batch, ``prefetch(AUTOTUNE)``. With ``--pause``, the consumer runs in bursts: every
``--burst`` steps it stops for ``--pause`` seconds (an evaluation, a checkpoint), while the
pipeline keeps filling its buffers.

Cases, each in a fresh container, alternating within each round:

- ``TF default``: TensorFlow as it is on this host (tfboot disabled);
- ``TF default, 64-core 512 GiB node (emulated)``: what TensorFlow picks on a big node,
  set explicitly in the pipeline's options (a 256 GiB RAM budget, a CPU budget of 64,
  initial parallelism 16) and 64 threads per pool, tfboot disabled;
- ``tfboot auto``: nothing set; tfboot reads the limits, and its memory governor gives
  freed elements back to the kernel when the working set nears the limit;
- ``tfboot auto, malloc left alone``: the same budgets, no governor
  (``HOST_MEMORY_RELEASE=false``): the governor's share of the outcome, and its cost in
  steps/s, side by side;
- ``hand-tuned ...``: the pipeline's own options, chosen by hand for this container.

Reported per case: finished or OOMKilled, peak memory of the container's cgroup
(``memory.peak`` or ``memory.max_usage_in_bytes``, page cache included, so it reaches the
limit whenever the libraries read fill it), the peak working set sampled every 50 ms
(usage minus inactive file cache: kubelet's ``container_memory_working_set_bytes``, what
eviction and dashboards see), steps/s over the timed steps (pauses excluded), p50 and p99
step time, and the threads of the process. Usage::

    python bench/host_memory.py                     # builds the test image if needed
    python bench/host_memory.py --memory 600m --cpus 2 --rounds 2 --pause 2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from cpu_quota import default_image, memory_arguments, quantile  # noqa: E402

# Runs inside the container; prints one JSON line at the end.
WORKLOAD = """
import json, os, sys, time
import tensorflow as tf
mib, batch, steps, burst, pause, warmup = (float(a) for a in sys.argv[1:7])
steps, burst, batch, warmup = int(steps), int(burst), int(batch), int(warmup)
options = json.loads(os.environ.get("PIPELINE_OPTIONS", "{}"))
side = int((mib * 2**20 / 4 / 3) ** 0.5)  # float32 RGB "decoded images" of mib MiB

def decode(i):
    seed = tf.stack([i, tf.constant(7, tf.int64)])
    image = tf.random.stateless_uniform([side, side, 3], seed=seed)
    return image, tf.cast(i % 10, tf.int32)

ds = tf.data.Dataset.range(10**9)
ds = ds.shuffle(256, seed=0)
ds = ds.map(decode, num_parallel_calls=options.pop("map_parallel", tf.data.AUTOTUNE))
ds = ds.batch(batch)
ds = ds.prefetch(options.pop("prefetch", tf.data.AUTOTUNE))
if options:
    opts = tf.data.Options()
    for name, value in options.items():
        setattr(opts.autotune, name, value)
    ds = ds.with_options(opts)

model = tf.keras.Sequential([
    tf.keras.layers.Input((side, side, 3)),
    tf.keras.layers.Conv2D(8, 3, strides=4, activation="relu"),
    tf.keras.layers.GlobalAveragePooling2D(),
    tf.keras.layers.Dense(10),
])
model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

def peak():
    for path in ("/sys/fs/cgroup/memory.peak", "/sys/fs/cgroup/memory/memory.max_usage_in_bytes"):
        if os.path.exists(path):
            return int(open(path).read()) / 2**20
    return None

def working_set():
    # kubelet's container_memory_working_set_bytes: usage minus inactive file cache
    for usage, stat, key in (("/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat",
                              "inactive_file"),
                             ("/sys/fs/cgroup/memory/memory.usage_in_bytes",
                              "/sys/fs/cgroup/memory/memory.stat", "total_inactive_file")):
        if os.path.exists(usage):
            fields = dict(line.split() for line in open(stat))
            return (int(open(usage).read()) - int(fields.get(key, 0))) / 2**20
    return 0.0

import threading
highest = [0.0]
def sample():
    while True:
        highest[0] = max(highest[0], working_set())
        time.sleep(0.05)
threading.Thread(target=sample, daemon=True).start()

class Timer(tf.keras.callbacks.Callback):
    times, started = [], 0.0
    def on_train_batch_begin(self, b, logs=None):
        self.started = time.perf_counter()
    def on_train_batch_end(self, b, logs=None):
        if b >= warmup:
            self.times.append(time.perf_counter() - self.started)
        if pause and (b + 1) % burst == 0:
            time.sleep(pause)  # evaluation, checkpoint: the pipeline keeps filling

timer = Timer()
model.fit(ds, steps_per_epoch=steps + warmup, epochs=1, verbose=0, callbacks=[timer])
print(json.dumps({"times": timer.times, "peak_mib": peak(), "working_set_mib": highest[0],
                  "threads": len(os.listdir("/proc/self/task"))}))
"""

BIG_NODE = "TF default, 64-core 512 GiB node (emulated)"
AUTO = "tfboot auto"
KEPT = "tfboot auto, malloc left alone (HOST_MEMORY_RELEASE=false)"
OFF = {"TFBOOT_DISABLE": "1"}


def cases(args: argparse.Namespace) -> dict[str, dict[str, str]]:
    """Each case's environment; PIPELINE_OPTIONS holds options the pipeline sets itself."""
    big = {"ram_budget": 256 * 2**30, "cpu_budget": 64, "initial_parallelism": 16}
    planned = {
        "TF default": dict(OFF),
        BIG_NODE: {
            **OFF,
            "PIPELINE_OPTIONS": json.dumps(big),
            "TF_NUM_INTRAOP_THREADS": "64",
            "TF_NUM_INTEROP_THREADS": "64",
        },
        AUTO: {},
        KEPT: {"HOST_MEMORY_RELEASE": "false"},
    }
    for budget in args.hand_budgets:
        options = {"ram_budget": budget * 2**20, "cpu_budget": int(args.cpus + 0.999)}
        planned[f"hand-tuned: ram_budget {budget} MiB"] = {
            **OFF,
            "PIPELINE_OPTIONS": json.dumps(options),
        }
    for mib in args.thresholds:
        planned[f"tfboot auto, MALLOC_MMAP_THRESHOLD_ {mib:g} MiB"] = {
            "MALLOC_MMAP_THRESHOLD_": str(int(mib * 2**20))
        }
    if args.hand_fixed:
        fixed = {"map_parallel": int(args.cpus + 0.999), "prefetch": 2}
        planned["hand-tuned: map parallel = CPUs, prefetch 2"] = {
            **OFF,
            "PIPELINE_OPTIONS": json.dumps(fixed),
        }
    return planned


@dataclass
class Cell:
    """Every run of one case."""

    finished: int = 0
    killed: int = 0
    failed: int = 0
    times: list[float] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)
    working: list[float] = field(default_factory=list)
    threads: set[int] = field(default_factory=set)

    def row(self, name: str) -> str:
        runs = self.finished + self.killed + self.failed
        outcome = f"{self.finished}/{runs} finished" + (
            f", {self.killed} OOMKilled" if self.killed else ""
        )
        if self.failed:
            outcome += f", {self.failed} failed"
        if not self.times:
            return f"| {name} | {outcome} | {_peak(self.peaks)} | - | - | - | - | - |"
        rate = len(self.times) / sum(self.times)
        p50, p99 = quantile(self.times, 50) * 1e3, quantile(self.times, 99) * 1e3
        threads = ",".join(str(t) for t in sorted(self.threads))
        return (
            f"| {name} | {outcome} | {_peak(self.peaks)} | {_peak(self.working)} "
            f"| {rate:.2f} | {p50:.0f} "
            f"| {p99:.0f} | {threads} |"
        )


def _peak(peaks: list[float]) -> str:
    return f"{max(peaks):.0f}" if peaks else "- (killed)"


def run_once(image: str, env: Mapping[str, str], args: argparse.Namespace) -> dict:
    """One container; the workload's JSON, or {"killed": True} / {"failed": ...}."""
    name = f"tfboot-bench-{uuid.uuid4().hex[:8]}"
    cmd = ["docker", "run", "--name", name, f"--memory={args.memory}",
           f"--memory-swap={args.memory}", f"--cpus={args.cpus:g}",
           "-e", "TF_CPP_MIN_LOG_LEVEL=2"]  # fmt: skip
    for key, value in env.items():
        cmd += ["-e", f"{key}={value}"]
    workload = [str(args.mib), str(args.batch), str(args.steps), str(args.burst),
                str(args.pause), str(args.warmup)]  # fmt: skip
    cmd += [image, "python3", "-c", WORKLOAD, *workload]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        inspect = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.OOMKilled}}", name],
            capture_output=True,
            text=True,
        )
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    if inspect.stdout.strip() == "true" or proc.returncode == 137:
        return {"killed": True}
    if proc.returncode != 0:
        return {"failed": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    memory_arguments(parser, "600m")
    parser.add_argument("--mib", type=float, default=16, help="MiB per decoded element")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--steps", type=int, default=60, help="timed steps per container")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--burst", type=int, default=10, help="steps between pauses")
    parser.add_argument("--pause", type=float, default=2.0, help="seconds; 0: steady consumer")
    parser.add_argument("--rounds", type=int, default=2, help="containers per case")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument(
        "--hand-budgets", type=int, nargs="*", default=[256], help="ram_budget MiB to try"
    )
    parser.add_argument("--hand-fixed", action="store_true", help="also try fixed parallelism")
    parser.add_argument(
        "--thresholds", type=float, nargs="*", default=[],
        help="also try tfboot's budgets with glibc's mmap threshold fixed at these MiB",
    )  # fmt: skip
    parser.add_argument("--only", nargs="*", help="run only these cases")
    args = parser.parse_args()
    image = args.image or default_image()
    planned = cases(args)
    if args.only:
        planned = {k: v for k, v in planned.items() if k in args.only}

    cells = {name: Cell() for name in planned}
    for round_ in range(args.rounds):
        order = list(planned) if round_ % 2 == 0 else list(reversed(planned))
        for name in order:
            result = run_once(image, planned[name], args)
            cell = cells[name]
            if result.get("killed"):
                cell.killed += 1
            elif "failed" in result:
                cell.failed += 1
                print(f"  {name}: failed\n{result['failed']}", file=sys.stderr)
            else:
                cell.finished += 1
                cell.times += result["times"]
                cell.threads.add(result["threads"])
                if result["peak_mib"] is not None:
                    cell.peaks.append(result["peak_mib"])
                cell.working.append(result["working_set_mib"])
            print(f"  {name}: round {round_ + 1}: {sorted(result)}", file=sys.stderr)

    consumer = f"bursts of {args.burst} steps, {args.pause:g} s pauses" if args.pause else "steady"
    print(
        f"image {image}; --memory={args.memory} (no swap) --cpus={args.cpus:g}; {args.rounds} "
        f"containers per case; {args.mib:g} MiB elements, batch {args.batch}, {args.steps} timed "
        f"steps; consumer: {consumer}"
    )
    print(
        "| case | outcome | cgroup peak MiB | working-set peak MiB | steps/s | p50 ms "
        "| p99 ms | threads |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, cell in cells.items():
        print(cell.row(name))


if __name__ == "__main__":
    main()

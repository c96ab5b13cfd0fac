"""What the host-memory budget costs where memory is not short: tfboot on against tfboot off.

Every container with a memory limit gets tfboot's host-memory budget (``HOST_MEMORY_LIMIT_MB=auto``
is the default). Where the working set stays well below the limit, the budget must cost
nothing: the same work, the same speed, the same page faults as with tfboot off. Each case
runs in a fresh container under ``docker run --memory=M --memory-swap=M --cpus=C``, tfboot on
(nothing set) and off (``TFBOOT_DISABLE=1``) alternating, ``--runs`` containers a side; in
each, ``--warmup`` untimed steps, then ``--steps`` timed ones. Reported per case: steps/s
(the median of the runs' rates) and their ratio on/off, the median of each run's own ratio
(the two sides of one run go back to back, so the machine's drift over the minutes of a
case cancels), the minor page faults of the timed steps (``getrusage``
``ru_minflt``: exact for the work, unlike a timing on a shared machine), the CPU seconds per
step, and how often the memory governor acted in the tfboot-on runs
(its trims and holds, from its own counters: 0 means memory was never short, and freed
memory was kept for reuse throughout).

Page faults are given as the minimum, median and maximum of each side. glibc's default
gives the top of its heap back whenever more than twice its mmap threshold lies free there
(at most 64 MiB), so the same work faults more or less by where its blocks land: where the
heap starts is drawn afresh in every process (address-space layout randomisation, hash
seeds), and where a framework's own threads allocate (PyTorch, Keras on JAX), by their
timing too (PyTorch's MLP step: 16,320 to 398,880 faults in six runs with tfboot off).
tfboot keeps freed memory while memory is plentiful, so its side is the steady one; a cost it
put on the work would be in every one of its runs, the minimum included.

The cases:

- ``numpy N MiB``: NumPy temporaries of N MiB after ``import torch`` (three arrays a step;
  4 and 48 MiB on either side of glibc's largest dynamic threshold, 32 MiB, besides 1, 8, 24, 64);
- ``torch MLP``: a PyTorch CPU training step (batch 4096, 256-1024-1024-10, Adam);
- ``keras/tensorflow``, ``keras/jax``: Keras 3 ``fit`` from NumPy arrays (8192 rows, the same
  model shape), one epoch a step, on each backend;
- ``jax MLP``: a jitted JAX gradient step on the same shapes;
- ``tensorflow eager``: eager ops on 16 MiB tensors (a matmul, elementwise ops, a copy to NumPy);
- ``page cache, numpy 8 MiB`` and ``/dev/shm, numpy 8 MiB``: the 8 MiB case after the limit
  was filled to 80% with page cache (a file written, then read twice, as an epoch re-reads
  its dataset) or with files in ``/dev/shm`` (every container gets ``--shm-size`` of its
  memory): neither is memory a trim of the heap can give back.

The last column counts the governor's trims of what glibc held free past its bound (4% of
the limit), which keep a burst from finding more kept than that.

The frameworks come from ``--frameworks``: a ``site-packages`` directory on this machine,
mounted read-only into the container and put first on ``PYTHONPATH`` (default: the test
environment's, ``.venv``, which holds TensorFlow, Keras, JAX and PyTorch for the image's
CPython). Usage::

    python bench/held_for_free.py                     # builds the test image if needed
    python bench/held_for_free.py --runs 5 --memory 4g --only "numpy 8 MiB" "torch MLP"
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from cpu_quota import default_image, memory_arguments  # noqa: E402

# Runs inside the container: CASE STEPS WARMUP; prints one JSON line.
WORKLOAD = """
import json, os, resource, sys, time
case, steps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
SHAPES = ((256, 1024), (1024, 1024), (1024, 10))

def numpy_case(mib):
    import torch  # noqa: F401  (tfboot configures PyTorch; the work is NumPy's)
    import numpy as np
    n = mib * 2**20 // 8
    def step():
        a = np.ones(n)
        b = a * 2.0
        c = b + a
        return float(c[0])
    return step

def torch_case():
    import torch
    torch.manual_seed(0)
    layers = []
    for a, b in SHAPES:
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    opt = torch.optim.Adam(model.parameters())
    x, y = torch.randn(4096, 256), torch.randint(0, 10, (4096,))
    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step

def keras_case(backend):
    os.environ["KERAS_BACKEND"] = backend
    import keras
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.random((8192, 256), dtype="float32")
    y = rng.integers(0, 10, 8192)
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024, activation="relu"),
                              keras.layers.Dense(1024, activation="relu"), keras.layers.Dense(10)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    def step():
        model.fit(x, y, batch_size=1024, epochs=1, verbose=0)
        return 0.0
    return step

def jax_case():
    import jax
    import jax.numpy as jnp
    import numpy as np
    rng = np.random.default_rng(0)
    params = [jnp.asarray(rng.random(s, dtype="float32") * 0.01) for s in SHAPES]
    x = jnp.asarray(rng.random((4096, 256), dtype="float32"))
    def loss(params, x):
        h = x
        for w in params[:-1]:
            h = jax.nn.relu(h @ w)
        return jnp.mean((h @ params[-1]) ** 2)
    grad = jax.jit(jax.grad(loss))
    state = [params]
    def step():
        state[0] = [w - 0.01 * g for w, g in zip(state[0], grad(state[0], x))]
        return float(state[0][0][0, 0])
    return step

def tensorflow_case():
    import tensorflow as tf
    x = tf.random.uniform([2048, 2048])
    def step():
        y = tf.matmul(x, x)
        z = tf.nn.relu(y * 0.5 - 1.0) + x
        return float(z.numpy()[0, 0])
    return step

def fill(where):
    # the limit filled to FILL with page cache (a file written, then read twice, as an epoch
    # re-reads its dataset) or with files in /dev/shm
    for limit_file, usage_file in (("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
                                   ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current")):
        if os.path.exists(limit_file):
            limit, usage = (int(open(f).read()) for f in (limit_file, usage_file))
            break
    path = "/dev/shm/fill" if where == "shm" else "/tmp/fill"
    block = b"\x07" * (8 << 20)
    with open(path, "wb") as sink:
        for _ in range(max(0, int(FILL * limit) - usage) >> 23):
            sink.write(block)
    for _ in range(2 if where == "cache" else 0):
        with open(path, "rb") as source:
            while source.read(8 << 20):
                pass

FILL = 0.8  # of the limit, for the page cache and /dev/shm cases
MAKERS = {"numpy": numpy_case, "torch": torch_case, "keras": keras_case, "jax": jax_case,
          "tensorflow": tensorflow_case}
name, _, arg = case.partition(":")
arg, _, filled = arg.partition(":")
step = MAKERS[name](int(arg)) if arg.isdigit() else MAKERS[name](*([arg] if arg else []))
if filled:
    fill(filled)
for _ in range(warmup):
    step()
before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
for _ in range(steps):
    step()
wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
found = {}  # what the memory governor did in this process (tfboot off: nothing)
if "tfboot.executor.governor" in sys.modules:
    running = sys.modules["tfboot.executor.governor"].current()
    found = running.stats() if running is not None else {}
print(json.dumps({"wall": wall, "faults": after.ru_minflt - before.ru_minflt,
                  "acted": found.get("trims", 0) + found.get("holds", 0),
                  "bounded": found.get("bounding_trims", 0),
                  "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}))
"""

# name -> (the workload's case, timed steps)
CASES = {  # each side's timed steps take some seconds: a shorter window is mostly noise
    "numpy 1 MiB": ("numpy:1", 3000),
    "numpy 4 MiB": ("numpy:4", 1500),
    "numpy 8 MiB": ("numpy:8", 800),
    "numpy 24 MiB": ("numpy:24", 300),
    "numpy 48 MiB": ("numpy:48", 200),
    "numpy 64 MiB": ("numpy:64", 150),
    "torch MLP": ("torch", 30),
    "keras/tensorflow": ("keras:tensorflow", 8),
    "keras/jax": ("keras:jax", 8),
    "jax MLP": ("jax", 30),
    "tensorflow eager": ("tensorflow", 60),
    "page cache, numpy 8 MiB": ("numpy:8:cache", 800),
    "/dev/shm, numpy 8 MiB": ("numpy:8:shm", 800),
}
SIDES = {"tfboot on": {}, "tfboot off": {"TFBOOT_DISABLE": "1"}}


@dataclass
class Side:
    """Every run of one case on one side."""

    rates: dict[int, float] = field(default_factory=dict)  # run -> steps/s
    faults: list[int] = field(default_factory=list)
    acted: int = 0  # the memory governor's trims and holds, all runs together
    bounded: int = 0  # its trims of what glibc kept past its bound, all runs together
    cpus: list[float] = field(default_factory=list)
    failed: int = 0

    def rate(self) -> float:
        return statistics.median(self.rates.values())

    def paired(self, other: Side) -> float:
        """The median over the runs both sides finished of this side's rate over ``other``'s."""
        return statistics.median(v / other.rates[r] for r, v in self.rates.items()
                                 if r in other.rates)  # fmt: skip


def run_once(image: str, case: str, steps: int, env: dict[str, str],
             args: argparse.Namespace) -> dict | None:  # fmt: skip
    cmd = ["docker", "run", "--rm", f"--memory={args.memory}", f"--memory-swap={args.memory}",
           f"--shm-size={args.memory}",
           f"--cpus={args.cpus:g}", "-e", "TF_CPP_MIN_LOG_LEVEL=2", "-e", "TFBOOT_LOG=quiet",
           "-e", "PYTHONPATH=/frameworks", "-v", f"{args.frameworks}:/frameworks:ro"]  # fmt: skip
    for key, value in env.items():
        cmd += ["-e", f"{key}={value}"]
    cmd += [image, "python3", "-c", WORKLOAD, case, str(steps), str(args.warmup)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        print(f"  {case}: exit {proc.returncode}\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    memory_arguments(parser, "4g")
    parser.add_argument(
        "--runs", type=int, default=8,
        help="containers per case and side (even: each side goes first as often)",
    )  # fmt: skip
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--frameworks", type=Path, help="site-packages with the frameworks")
    parser.add_argument("--only", nargs="*", help="run only these cases")
    args = parser.parse_args()
    if args.frameworks is None:
        venv = REPO / ".venv"
        purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
        args.frameworks = Path(purelib)
    image = args.image or default_image()
    planned = {k: v for k, v in CASES.items() if not args.only or k in args.only}
    found = {(case, side): Side() for case in planned for side in SIDES}
    for run in range(args.runs):
        for case, (workload, steps) in planned.items():
            order = list(SIDES) if run % 2 == 0 else list(reversed(SIDES))
            for side in order:
                result = run_once(image, workload, steps, SIDES[side], args)
                cell = found[(case, side)]
                if result is None:
                    cell.failed += 1
                    continue
                cell.rates[run] = steps / result["wall"]
                cell.faults.append(result["faults"])
                cell.acted += result["acted"]
                cell.bounded += result["bounded"]
                cell.cpus.append(result["cpu"] / steps)
            print(f"  run {run + 1}: {case}", file=sys.stderr)
    print(f"image {image}; --memory={args.memory} (no swap) --cpus={args.cpus:g}; {args.runs} "
          f"containers per case and side, alternating; tfboot off: TFBOOT_DISABLE=1")  # fmt: skip
    print(
        "| case | steps/s on | steps/s off | on/off (paired) "
        "| minor faults on: min / median / max | off | on/off (minima) | on/off (medians) "
        "| CPU ms/step on | off | governor acted (on) | bounding trims (on) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for case in planned:
        on, off = found[(case, "tfboot on")], found[(case, "tfboot off")]
        if not on.rates or not off.rates:
            print(f"| {case} | failed {on.failed} | failed {off.failed} | | | | | | | | | |")
            continue
        print(
            f"| {case} | {on.rate():.2f} | {off.rate():.2f} "
            f"| {on.paired(off):.3f} | {_faults(on.faults)} | {_faults(off.faults)} "
            f"| {min(on.faults) / max(1, min(off.faults)):.2f} "
            f"| {statistics.median(on.faults) / max(1, statistics.median(off.faults)):.2f} "
            f"| {1e3 * sum(on.cpus) / len(on.cpus):.1f} "
            f"| {1e3 * sum(off.cpus) / len(off.cpus):.1f} | {on.acted} | {on.bounded} |"
        )


def _faults(counts: list[int]) -> str:
    return f"{min(counts)} / {statistics.median(counts):.0f} / {max(counts)}"


if __name__ == "__main__":
    main()

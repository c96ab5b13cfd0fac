"""docs/architecture.md's "Where to add" recipes, each followed once with a made-up part: a
device plugin, a framework, a cluster engine. Each part is added the way the recipe says
(a row in the table it names, a module of the adapter's shape, an engine's file) and is
then read by the code that already exists, unchanged: what the recipe promises.

The framework's recipe and the engine's are followed in a copy of the package (the
framework's row written into the one table, ``tfboot.FRAMEWORKS``, and its adapter module
beside the others; the engine's file), run in fresh processes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import REPO, last_json, scenario_env
from tfboot.budget.caps import Headroom, settings_for
from tfboot.errors import ConfigError, Problem
from tfboot.node import deviceplugin
from tfboot.node.deviceplugin import Plugin, PluginLimit
from tfboot.settings import resolve

ACME = "ACME_GPU_MEMORY_MIB"  # the made-up plugin's variable


def _acme(env: Mapping[str, str], problems: list[Problem]) -> PluginLimit | None:
    value = env.get(ACME, "").strip()
    if not value:
        return None
    if not value.isdigit():
        problems.append(Problem(ACME, value, "whole MiB"))
        return None
    return PluginLimit(int(value), {}, f"Acme {ACME}={value}")


def test_a_made_up_device_plugin_is_one_row(monkeypatch) -> None:
    """Recipe: a reader and one ``Plugin`` row in ``PLUGINS``. ``auto`` reads its share,
    each framework's cap is taken below it, and the error for no share names it."""
    row = Plugin("acme", "Acme", ACME, True, _acme)
    monkeypatch.setattr(deviceplugin, "PLUGINS", (*deviceplugin.PLUGINS, row))
    from tfboot.frameworks import ADAPTERS

    env = {"MEMORY_LIMIT_MB": "auto", ACME: "8192"}
    assert resolve(env).share == PluginLimit(8192, {}, f"Acme {ACME}=8192")
    assert settings_for(ADAPTERS["torch"], env).memory_limit_mb == 8192 - 1024
    assert settings_for(ADAPTERS["tensorflow"], env).memory_limit_mb == 8192 - 1536
    with pytest.raises(ConfigError, match=ACME):
        resolve({"MEMORY_LIMIT_MB": "auto"})


def test_a_made_up_framework_is_its_adapter_s_declarations() -> None:
    """Recipe: an adapter of the shape, with its ``HEADROOM`` where it reads a GPU cap. The
    one budget rule takes its cap below a share from that figure and names it; one that
    reads a cap and declares none is refused by name, never given another's figure."""
    room = Headroom(700, "MXNet's own, measured")
    reads = frozenset({"MEMORY_LIMIT_MB"})
    mxnet = SimpleNamespace(MODULE="mxnet", NAME="MXNet", READS=reads, MIRRORS={}, HEADROOM=room)
    env = {"MEMORY_LIMIT_MB": "auto", "CUDA_DEVICE_MEMORY_LIMIT": "4096m"}
    settings = settings_for(mxnet, env)
    assert settings.memory_limit_mb == 4096 - 700
    assert settings.source("MEMORY_LIMIT_MB").endswith(
        "minus 700 MiB of headroom for MXNet (MXNet's own, measured)"
    )
    with pytest.raises(KeyError, match="no GPU headroom declared for MXNet"):
        settings_for(SimpleNamespace(**{**vars(mxnet), "HEADROOM": None}), env)


# The made-up framework's adapter, of the shape docs/architecture.md gives: it reads the GPU
# cap and growth, writes the cap into the framework's own variable before its code runs,
# and declares its headroom; its growth variable mirrors MEMORY_GROWTH.
MXNET_ADAPTER = '''"""MXNet's adapter (made up for tests/test_recipes.py)."""

from __future__ import annotations

from typing import Any

from ..budget.caps import Headroom
from ..budget.roles import NAMES, decide
from ..errors import Problem
from . import Plan

MODULE = "mxnet"
NAME = NAMES[MODULE]
QUALIFIED = True
OLDEST: dict[str, tuple[int, ...]] = {}
DISTRIBUTIONS = ()
READS = frozenset({"MEMORY_LIMIT_MB", "MEMORY_GROWTH", "MEMORY_HEADROOM_MB"})
PREFIX = "mxnet."
HEADROOM = Headroom(700, "MXNet's own, measured")
MIRRORS = {"MEMORY_GROWTH": "MXNET_GPU_MEM_GROWTH"}
LAUNCH = None
STAGES = ("before",)
REPORTED_BY = ""
SETS = ()
LIMIT = "MXNET_GPU_MEM_LIMIT_MB"
WRITES = (LIMIT,)


def role(importing, taken, backend):
    return decide(MODULE, importing, backend)


def facts(stage, budget, read) -> dict[str, Any]:
    return {}


def plan(stage, budget, facts) -> Plan:
    plan = Plan(NAME, budget.role)
    cap = budget.settings.memory_limit_mb
    if cap is not None:
        plan.environ[LIMIT] = str(cap)
        plan.decisions.append(f"{LIMIT}={cap} from {budget.settings.shown('MEMORY_LIMIT_MB')}")
    return plan


def refused(described, exc, applied) -> Problem:
    return Problem("MEMORY_LIMIT_MB", None, f"MXNet refused {described} ({exc})")


def peaks(read, plan) -> list:
    return []
'''
# A Pod under a DRA claim's MPS limit, its image's name naming the made-up framework.
SHARE_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: train
spec:
  resourceClaims:
    - name: gpu
      resourceClaimTemplateName: mps-10g
  containers:
    - name: train
      image: registry.example/mxnet:1.9
      resources:
        claims:
          - name: gpu
      env:
        - name: MEMORY_LIMIT_MB
          value: auto
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: mps-10g
spec:
  spec:
    devices:
      requests:
        - name: mps-gpu
          exactly:
            deviceClassName: gpu.nvidia.com
      config:
        - requests: ["mps-gpu"]
          opaque:
            driver: gpu.nvidia.com
            parameters:
              apiVersion: resource.nvidia.com/v1beta1
              kind: GpuConfig
              sharing:
                strategy: MPS
                mpsConfig:
                  defaultPinnedDeviceMemoryLimit: 10Gi
"""


@pytest.fixture(scope="module")
def mxnet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package with the recipe followed, and the made-up framework beside it
    (a package ``mxnet``, 1.9.1): the folder to put on ``PYTHONPATH``."""
    lib = tmp_path_factory.mktemp("recipe")
    package = lib / "tfboot"
    shutil.copytree(REPO / "bootstrap" / "tfboot", package,
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    init = package / "__init__.py"
    text, rows = re.subn(r"^(FRAMEWORKS = \{\n.*?)^\}$", r'\1    "mxnet": ("mxnet", "MXNet"),\n}',
                         init.read_text(), count=1, flags=re.M | re.S)  # fmt: skip
    assert rows == 1, "the one table of frameworks was not found"
    init.write_text(text)
    (package / "adapters" / "mxnet.py").write_text(MXNET_ADAPTER)
    (lib / "mxnet").mkdir()
    (lib / "mxnet" / "__init__.py").write_text('"""A made-up framework."""\n')
    (lib / "mxnet" / "version.py").write_text("__version__ = '1.9.1'\n")
    return lib


def run(lib: Path, args: list[str], stdin: str = "", **env: str) -> subprocess.CompletedProcess:
    """``args`` run by this Python with the copy first on its path, in ``env``."""
    env = scenario_env({"PYTHONPATH": str(lib), **env})
    return subprocess.run([sys.executable, *args], input=stdin, text=True, capture_output=True,
                          env=env, timeout=120)  # fmt: skip


def tfboot_cli(lib: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess:
    return run(lib, ["-m", "tfboot", *args], stdin, **env)


def test_a_made_up_framework_is_configured_at_its_import(mxnet: Path) -> None:
    """Recipe, two files: the trampoline hooks its import and the executor applies its plan
    (the cap written into its own variable, the line naming it by the table's name)."""
    code = ("import tfboot, mxnet, os; from tfboot.executor import results; "
            "print(os.environ.get('MXNET_GPU_MEM_LIMIT_MB'), results()['mxnet'].framework, "
            "tfboot.__file__)")  # fmt: skip
    done = run(mxnet, ["-c", code], MEMORY_LIMIT_MB="2048", TFBOOT_LOG="info")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2048", "MXNet", str(mxnet / "tfboot" / "__init__.py")]
    assert "tfboot: configured MXNet" in done.stderr, done.stderr


def test_a_made_up_framework_is_shown_and_checked(mxnet: Path) -> None:
    """``tfboot show`` gives its headroom below a share; ``tfboot check`` takes it as a
    ``--framework`` and judges its import, its mirror contradicting the contract by name."""
    done = tfboot_cli(mxnet, "show", "--json", MEMORY_LIMIT_MB="auto",
                      CUDA_DEVICE_MEMORY_LIMIT="4096m")  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["headroom_mib"]["MXNet"] == 700
    assert shown["headroom_why"]["MXNet"] == "MXNet's own, measured"
    done = tfboot_cli(mxnet, "check", "--framework", "mxnet", "--json", MEMORY_GROWTH="true")
    assert done.returncode == 0 and json.loads(done.stdout)["ok"], done.stdout + done.stderr
    done = tfboot_cli(mxnet, "check", "--framework", "mxnet", "--json", MEMORY_GROWTH="true",
                      MXNET_GPU_MEM_GROWTH="false")  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    (problem,) = json.loads(done.stdout)["problems"]
    assert problem["framework"] == "MXNet" and problem["variable"] == "MEMORY_GROWTH"
    assert problem["accepted"] == "it contradicts MXNET_GPU_MEM_GROWTH='false'"


def test_a_made_up_framework_is_judged_in_manifests_and_inject(mxnet: Path) -> None:
    """A container whose image names it is judged for it (``kube.headroom.advice``):
    ``tfboot manifests`` says so, and ``inject --memory-from-claims`` writes the DRA claim's
    MPS limit minus its 700 MiB of headroom."""
    yaml = pytest.importorskip("yaml")
    done = tfboot_cli(mxnet, "manifests", "--json", "-", stdin=SHARE_POD)
    assert "Traceback" not in done.stderr, done.stderr
    found = {f["rule"]: f for f in json.loads(done.stdout)["findings"]}
    assert found["dra-mps-memory-auto"]["hint"] == (
        "set MEMORY_LIMIT_MB to 9540 (the limit minus 700 MiB of headroom for MXNet "
        "(MXNet's own, measured))"
    )
    done = tfboot_cli(mxnet, "inject", "--image", "registry.example/tfboot-inject:0.1.0",
                      "--memory-from-claims", "-", stdin=SHARE_POD)  # fmt: skip
    assert done.returncode == 0, done.stderr
    pod = next(d for d in yaml.safe_load_all(done.stdout) if d["kind"] == "Pod")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["MEMORY_LIMIT_MB"] == "9540"


def test_a_made_up_framework_is_sized_by_the_suggestion(mxnet: Path, tmp_path: Path) -> None:
    """``tfboot suggest`` over a run whose GPU was the made-up framework's: the share it
    advises keeps that framework's headroom, by its name."""
    record = {
        "schema": "tfboot.usage/v1",
        "final": True,
        "gpus": [{"index": 0, "physical": 0, "framework": "MXNet", "peak_mib": 3000.0}],
        "host_memory": {"peak_mib": 1000.0, "limit_mib": 2048, "oom_kills": 0},
        "cpu": {"used_cpus": 1.0, "quota": 2.0, "throttled_fraction": 0.0},
    }
    path = tmp_path / "usage.json"
    path.write_text(json.dumps(record))
    done = tfboot_cli(mxnet, "suggest", "--json", str(path))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)["suggest"]
    assert found["gpu_share_mib"] == 3456 + 700
    assert found["sources"]["gpu_share_mib"] == (
        "MEMORY_LIMIT_MB + 700 MiB: nothing measured outside the pool, so MXNet's headroom "
        "below a share (MXNet's own, measured)"
    )


ENGINE = '''"""Acme: a made-up scheduler that sets ACME_RANK and ACME_SIZE, every rank here."""

from . import Engine, Identity, by_rank, drawn_port


class Acme(Engine):
    name = "acme"
    order = 40  # after the others

    def present(self, cluster, env):
        return "ACME_RANK" in env

    def build(self, cluster, env):
        size, rank = int(env["ACME_SIZE"]), int(env["ACME_RANK"])
        base = cluster.port or drawn_port(0)
        job = by_rank(cluster, [f"127.0.0.1:{base + r}" for r in range(size)], rank, "Acme's rank")
        sources = {"type": "ACME_RANK", "index": "ACME_RANK", "hosts": "ACME_SIZE"}
        return Identity(self.name, job, build=True, sources=sources)
'''
PROBE = """import json, os
from tfboot.cluster import MODES
from tfboot.cluster.engines import detect
from tfboot.cluster.plan import plan_cluster
from tfboot.frameworks import ADAPTERS
from tfboot.settings import resolve
settings = resolve(dict(os.environ))
plans = {a.NAME: plan_cluster(a.LAUNCH, a.NAME, settings.distributed, settings.cluster, os.environ,
                              {"agent": None}) for a in ADAPTERS.values() if a.LAUNCH}
print(json.dumps({"modes": MODES, "auto": detect("auto", settings.cluster, os.environ),
                  "set": {n: p.launch.environ for n, p in plans.items()}}))
"""


@pytest.mark.parametrize("mode", ["acme", "auto"])
def test_a_made_up_engine_is_one_file(tmp_path: Path, mode: str) -> None:
    """Recipe: a file in ``cluster/engines/`` named for its mode, in a copy of the package.
    ``DISTRIBUTED`` takes it as a mode, ``auto`` finds it where it is present, and every
    framework's writer forms the job from it, with nothing else changed."""
    shutil.copytree(REPO / "bootstrap" / "tfboot", tmp_path / "tfboot",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    (tmp_path / "tfboot" / "cluster" / "engines" / "acme.py").write_text(ENGINE)
    env = {"PYTHONPATH": str(tmp_path), "DISTRIBUTED": mode, "ACME_RANK": "1", "ACME_SIZE": "2"}
    done = subprocess.run([sys.executable, "-c", PROBE], env=scenario_env(env),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = last_json(done.stdout)
    assert "acme" in found["modes"] and found["auto"] == "acme"
    config = json.loads(found["set"]["TensorFlow"]["TF_CONFIG"])
    assert (
        config["task"] == {"type": "worker", "index": 1} and len(config["cluster"]["worker"]) == 2
    )
    assert found["set"]["PyTorch"]["RANK"] == "1" and found["set"]["PyTorch"]["WORLD_SIZE"] == "2"
    assert found["set"]["JAX"]["KERAS_DISTRIBUTION_PROCESS_ID"] == "1"

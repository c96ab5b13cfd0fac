"""docs/architecture.md's "Where to add" recipes, each followed once with a made-up part: a
device plugin, a framework, a cluster engine. Each part is added the way the recipe says
(a row in the table it names, a module of the adapter's shape, an engine's file) and is
then read by the code that already exists, unchanged: what the recipe promises.
"""

from __future__ import annotations

import json
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

"""docs/architecture.md's "Where to add" recipes, each followed once with a made-up part: a
device plugin, a framework, a cluster engine. Each part is added the way the recipe says
(a row in the table it names, or a module of the adapter's shape) and is then read by the
code that already exists, unchanged: what the recipe promises.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

import pytest
from tfboot.budget.caps import Headroom, settings_for
from tfboot.cluster import engines
from tfboot.cluster.engines import Engine, Identity
from tfboot.cluster.variables import read_cluster
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


class Acme(Engine):
    """A made-up engine: its scheduler sets ACME_RANK and ACME_PEERS."""

    name = "acme"

    def present(self, cluster, env) -> bool:
        return "ACME_RANK" in env

    def build(self, cluster, env) -> Identity:
        return Identity(self.name, None, build=True, sources={"index": "ACME_RANK"})


def test_a_made_up_engine_is_one_class_and_its_row(monkeypatch) -> None:
    """Recipe: a class with ``present`` and ``build`` and its row in ``ENGINES``.
    ``DISTRIBUTED=auto`` finds it where it is present, in the table's order, and asks it
    who this task is; elsewhere the engines before it are unchanged."""
    acme = Acme()
    monkeypatch.setattr(engines, "ENGINES", (*engines.ENGINES, acme))
    monkeypatch.setattr(engines, "BY_NAME", {**engines.BY_NAME, "acme": acme})
    cluster = read_cluster({}, lambda name, parse, accepted: None)
    assert engines.detect("auto", cluster, {"ACME_RANK": "1"}) == "acme"
    assert engines.identify("auto", cluster, {"ACME_RANK": "1"}) == Identity(
        "acme", None, build=True, sources={"index": "ACME_RANK"}
    )
    assert engines.detect("auto", cluster, {"ACME_RANK": "1", "TF_CONFIG": "{}"}) == "tf_config"
    assert engines.detect("auto", cluster, {}) == "single"

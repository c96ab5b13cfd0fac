"""Markers for the whole suite: which tests are slow (over 5 s on a 2-core machine).

Every test that starts a container, a simulated-GPU TensorFlow process, a cluster of
TensorFlow processes or the pinned nightly is slow by nature, and gets ``slow`` from its
other marker here; other slow tests carry ``@pytest.mark.slow`` themselves (measured with
``--durations``). ``pytest -m "not slow"`` is the quick set (see the README).
"""

from __future__ import annotations

import pytest

SLOW_BY_NATURE = ("docker", "simgpu", "multiworker", "nightly", "slurm")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(name) for name in SLOW_BY_NATURE):
            item.add_marker(pytest.mark.slow)

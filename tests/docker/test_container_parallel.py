"""Twenty containers started at once each get their own configuration."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from container_runs import DOCTOR_CMD, Outcome, run_container

pytestmark = pytest.mark.docker

CONTAINERS = 20


def test_twenty_containers_each_report_their_own_split(tfboot_image: str) -> None:
    def one(split: int) -> Outcome:
        # Twenty TensorFlow imports share the machine's cores: allow them time.
        return run_container(tfboot_image, DOCTOR_CMD, {"VIRTUAL_SPLIT": str(split)}, timeout=900)

    splits = range(1, CONTAINERS + 1)
    with ThreadPoolExecutor(max_workers=CONTAINERS) as pool:
        outcomes = dict(zip(splits, pool.map(one, splits), strict=False))

    counts = {
        split: len(outcome.json()["logical_devices"]["CPU"]) if outcome.exit_code == 0 else None
        for split, outcome in outcomes.items()
    }
    wrong = {split: count for split, count in counts.items() if count != split}
    assert not wrong, f"{CONTAINERS - len(wrong)}/{CONTAINERS} right; wrong: {wrong}\n" + "\n".join(
        str(outcomes[split]) for split in list(wrong)[:2]
    )

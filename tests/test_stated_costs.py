"""The README's stated costs of the test command (``scripts/stated_costs.py``).

The README is parsed as it stands (every figure present, one time said everywhere), and a
real pytest run's JUnit XML is counted; the comparison is given made-up measurements on
each side of its slack.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from stated_costs import README, Stated, compare, ran, stated  # noqa: E402


def test_the_readme_states_every_figure_and_one_time() -> None:
    claims = stated(README.read_text())
    assert claims.tests > 1000 and claims.clone_gb > 1 and claims.images_gb > 1
    assert len(set(claims.minutes)) == 1, f"the README states different times: {claims.minutes}"


def test_a_missing_figure_is_named() -> None:
    with pytest.raises(ValueError, match="the images' size"):
        stated("1552 tests in 19 min; about 25 minutes; the clone grows to about 14 GB")


def test_a_real_runs_count_is_read(tmp_path: Path) -> None:
    (tmp_path / "test_three.py").write_text(
        "import pytest\n\ndef test_a(): pass\n\ndef test_b(): assert False\n\n"
        "@pytest.mark.skip(reason='x')\ndef test_c(): pass\n"
    )
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={junit}", str(tmp_path / "test_three.py")],
                   capture_output=True, cwd=tmp_path, check=False)  # fmt: skip
    assert ran(junit) == 3


CLAIMS = Stated(tests=1000, minutes=(25,), clone_gb=14.0, images_gb=6.4)


def test_the_count_holds_within_its_slack_and_fails_past_it() -> None:
    lines, holds = compare(CLAIMS, 1020, 25 * 60, 14.2, 6.4)
    assert holds and lines[0] == "tests: 1020 collected, README.md states 1000"
    assert not any("warning" in line for line in lines)
    lines, holds = compare(CLAIMS, 1040, 25 * 60, 14.2, 6.4)
    assert not holds and "this run collected 1040" in lines[0]


def test_time_and_disk_off_by_half_warn_and_never_fail() -> None:
    lines, holds = compare(CLAIMS, 1000, 60 * 60, 30.0, None)
    assert holds
    assert "time: 60 min, README.md says about 25 min (warning: update README.md)" in lines
    assert "clone: 30.0 GB, README.md says about 14 GB (warning: update README.md)" in lines
    assert "images: not measured here, README.md says about 6.4 GB" in lines

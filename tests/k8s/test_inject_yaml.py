"""``tfboot inject`` edits YAML safely or refuses: every output is parsed again and compared
with the objects intended, so a text edit that went wrong is an error naming the document,
never corrupt output with status 0 (regressions of the outside probe: a block-scalar
``PYTHONPATH`` glued to the next line, a flow list's trailing comma doubled, a merge key's
traceback, a timestamp rewritten). Each form is kept exactly or refused clearly.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

IMAGE = "registry.example/tfboot-inject:0.1.0"
HEAD = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n"
CONTAINER = "      - name: train\n        image: registry.example/train:1.0\n"


def tfboot(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tfboot", *args], input=stdin, text=True,
                          capture_output=True, timeout=60)  # fmt: skip


KEPT = {
    "timestamp": HEAD.replace("{name: j}", "{name: j, creationTimestamp: 2024-01-01T00:00:00Z}")
    + "spec:\n  template:\n    spec:\n      containers:\n"
    + CONTAINER,
    "crlf": (HEAD + "spec:\n  template:\n    spec:\n      containers:\n" + CONTAINER).replace(
        "\n", "\r\n"
    ),
    "bom": "\ufeff" + HEAD + "spec:\n  template:\n    spec:\n      containers:\n" + CONTAINER,
}
KEPT.update(
    {
        "block scalar PYTHONPATH": HEAD
        + "spec:\n  template:\n    spec:\n      containers:\n"
        + CONTAINER
        + "        env:\n        - name: PYTHONPATH\n          value: >-\n"
        "            /srv/lib\n        - name: MODE\n          value: fast\n",
        "trailing comma": HEAD
        + "spec:\n  template:\n    spec:\n      containers:\n"
        + CONTAINER
        + "      volumes: [{name: data, emptyDir: {}},]\n",
        "merge key": HEAD + "x-base: &base\n  image: registry.example/train:1.0\nspec:\n"
        "  template:\n    spec:\n      containers:\n      - <<: *base\n        name: train\n",
    }
)
REFUSED = {
    # The env list comes from the merge: editing it would change every user of the anchor.
    "merged env": HEAD + "x-base: &base\n  image: registry.example/train:1.0\n  env:\n"
    "  - {name: PYTHONPATH, value: /srv/lib}\nspec:\n  template:\n    spec:\n"
    "      containers:\n      - <<: *base\n        name: train\n",
}


@pytest.mark.parametrize("form", list(KEPT))
def test_kept_exactly(form: str) -> None:
    text = KEPT[form]
    done = subprocess.run([sys.executable, "-m", "tfboot", "inject", "--image", IMAGE, "-"],
                          input=text.encode(), capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    if form == "crlf":
        assert "\n" not in out.replace("\r\n", "")  # every line written ends as the text's own
    if form == "bom":
        assert out.startswith("\ufeff")
    back = subprocess.run([sys.executable, "-m", "tfboot", "uninject", "-"], input=out.encode(),
                          capture_output=True, timeout=60)  # fmt: skip
    assert back.stdout.decode() == text


@pytest.mark.parametrize("form", list(REFUSED))
def test_refused_clearly(form: str) -> None:
    text = REFUSED[form]
    yaml.safe_load(text)  # valid YAML, which the edit cannot keep
    done = tfboot("inject", "--image", IMAGE, "-", stdin=text)
    assert done.returncode == 1 and done.stdout == "", done.stdout
    assert done.stderr.startswith("tfboot inject: <stdin>: ")
    assert done.stderr.endswith("; nothing was printed\n") and "Traceback" not in done.stderr

"""Start-up cost of the injected hook (``tfboot inject``), measured side by side in one run.

Counts the instructions of ``python -c pass`` under callgrind (exact and repeatable) in a
hard-linked twin of this environment without tfboot (``bench/startup.py`` makes it), as an
image nobody rebuilt would start it:

  1. nothing injected (the image as it was, no tfboot in its site-packages);
  2. tfboot installed into the twin's site-packages (``tfboot.pth``), for comparison;
  3. the injected tree: ``PYTHONPATH=<hook>``, the hook starting the tree's tfboot (the
     twin's own tfboot package moved aside, as in an image that never had it);
  4. the same with the image's ``PYTHONPATH`` recorded (``TFBOOT_INJECTED``, as inject's
     probe leaves it), the hook putting it back on ``sys.path`` and ``PYTHONPATH``;
  5. the image's own ``sitecustomize`` on its ``PYTHONPATH``, without and with the hook
     chaining it: what chaining adds to an image that has one;
  6. the floor of any injection through ``PYTHONPATH``: an empty ``sitecustomize`` (its
     bytecode compiled) alone in a folder first on ``PYTHONPATH``, no tfboot at all. The
     injected row can come no closer to the installed one than this row's cost.

The tree is made by ``docker/inject/build.sh --tree`` (the wheel unpacked with pip,
bytecode that is never checked against the source). Usage: python bench/inject_startup.py
(valgrind on PATH)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from startup import clean_env, instructions, twin_without_tfboot

REPO = Path(__file__).resolve().parents[1]


def make_tree(root: Path) -> Path:
    """The injector image's tree at ``root`` (``docker/inject/build.sh --tree``); its hook."""
    subprocess.run(["bash", str(REPO / "docker" / "inject" / "build.sh"), "--tree", str(root)],
                   env={**os.environ, "PYTHON": sys.executable}, check=True)  # fmt: skip
    return root / "hook"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    with tempfile.TemporaryDirectory(dir=Path(sys.prefix).parent) as tmp:
        twin = str(twin_without_tfboot(Path(tmp) / "twin"))
        hook = make_tree(Path(tmp) / "tfboot")
        image = Path(tmp) / "image-lib"
        image.mkdir()
        (image / "sitecustomize.py").write_text("import sys\nsys.image_hook_ran = True\n")
        subprocess.run([twin, "-m", "compileall", "-q", str(image)], check=True)
        purelib = Path(sysconfig.get_paths()["purelib"]).relative_to(sys.prefix)
        installed = Path(tmp) / "twin" / purelib / "tfboot.pth"
        env = clean_env({})
        installed.write_text((REPO / "bootstrap" / "tfboot.pth").read_text())
        with_pth = instructions(twin, env)
        installed.unlink()
        aside = Path(tmp) / "aside"  # the image never had tfboot: only the tree's is found
        aside.mkdir()
        for name in ("tfboot", "tfboot.py"):
            (installed.parent / name).rename(aside / name)
        rows = [("nothing injected", instructions(twin, env)),
                ("tfboot installed (tfboot.pth)", with_pth),
                ("injected (PYTHONPATH=hook)",
                 instructions(twin, {**env, "PYTHONPATH": str(hook)}))]  # fmt: skip
        (hook.parent / "env" / "app.pythonpath").write_text(f"{image}\n")
        rows.append(("injected, image PYTHONPATH recorded (+chain)",
                     instructions(twin, {**env, "PYTHONPATH": str(hook),
                                         "TFBOOT_INJECTED": "app"})))  # fmt: skip
        empty = Path(tmp) / "empty-hook"
        empty.mkdir()
        (empty / "sitecustomize.py").write_text("")
        subprocess.run([twin, "-m", "compileall", "-q", str(empty)], check=True)
        rows.append(("floor: empty sitecustomize first on PYTHONPATH",
                     instructions(twin, {**env, "PYTHONPATH": str(empty)})))  # fmt: skip
        own = instructions(twin, {**env, "PYTHONPATH": str(image)})
        chained = instructions(twin, {**env, "PYTHONPATH": f"{hook}:{image}"})
    base = rows[0][1]
    print(f"python {sys.version.split()[0]}; instructions of `python -c pass`")
    for label, count in rows:
        print(f"{label:<42} {count / 1e6:>8.3f} M  {count / base - 1:>+7.2%}")
    print(f"{'image sitecustomize, nothing injected':<42} {own / 1e6:>8.3f} M")
    print(f"{'image sitecustomize, chained by the hook':<42} {chained / 1e6:>8.3f} M  "
          f"{chained / own - 1:>+7.2%}")  # fmt: skip


if __name__ == "__main__":
    main()

"""What a program sees of an error it catches: its type, message and traceback (file, line,
function of each frame), its causes' as well; shared by ``torch_program.py`` and
``tensorflow_program.py``, which print ``report(cases)`` as one JSON line."""

import json
import os
import sys
import traceback
from collections.abc import Callable


def shown(error: BaseException | None) -> list:
    """The error's traceback and its causes', outermost error first."""
    chain = []
    while error is not None:
        frames = [[f.filename, f.lineno, f.name] for f in traceback.extract_tb(error.__traceback__)]
        chain.append([type(error).__name__, str(error), frames])
        error = error.__cause__ or error.__context__
    return chain


def report(cases: dict[str, Callable[[], object]]) -> None:
    """Run each case, catching what it raises where the program would; print case -> what
    it shows (None: it raised nothing), and under ``tfboot`` the folder of the tfboot that
    ran (None: none did)."""
    tfboot = sys.modules.get("tfboot")
    folder = os.path.dirname(tfboot.__file__) if getattr(tfboot, "__file__", None) else None
    seen: dict[str, object] = {"tfboot": folder}
    for name, case in cases.items():
        try:
            case()
        except Exception as error:  # the user's error, whatever it is
            seen[name] = shown(error)
        else:
            seen[name] = None
    print(json.dumps(seen))

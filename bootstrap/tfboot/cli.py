"""The ``tfboot`` command line: show, check, doctor, selftest, manifests, inject, uninject,
suggest."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from . import __version__
from .budget.roles import NAMES
from .errors import ConfigError
from .settings import MAX_MEMORY_MB
from .values import digits, hide_credentials, line, quote, rows

MIN_CAP_MB = 64  # selftest: room for growth's first regions in each half of a split
MAX_TIMEOUT_S = 86400  # selftest: a day per row is already far past any sane wait

DESCRIPTION = """\
tfboot makes TensorFlow, Keras 3, JAX and PyTorch obey a container's budget (GPUs, GPU
memory, CPU threads, host memory) from environment variables, applied at the framework's
import with no change to your code (VISIBLE_GPU, MEMORY_LIMIT_MB, CPU_THREADS, ...)."""

EPILOG = """\
examples:
  MEMORY_LIMIT_MB=6144 VIRTUAL_SPLIT=2 tfboot show
  tfboot check --env-file deploy/tfboot.env
  VIRTUAL_SPLIT=2 python -m tfboot doctor --json
  tfboot selftest --gpu 1 --json
  kubectl kustomize k8s/overlays/virtual-split | tfboot manifests -
  tfboot inject --image registry.example/tfboot-inject:0.1.0 job.yaml > job.injected.yaml
  tfboot suggest --patch usage/*.json > overlays/sized/usage.yaml
"""


# Defaults that read better as the README gives them than as the parsed value (None).
SHOWN_DEFAULTS = {"VISIBLE_GPU": "all"}


def _planned(module: str, env: Mapping[str, str]) -> Any:
    """What ``module``'s import would do here (``executor.planned``), whether it is
    installed or not: nothing imported, written or applied."""
    from .executor import planned
    from .frameworks import ADAPTERS
    from .node.versions import installed

    return planned(ADAPTERS[module], env, version=installed(module))


def _cluster(tensorflow: Any) -> dict[str, Any] | None:
    """The cluster as TensorFlow's import plans it (``tensorflow``: ``_planned``'s;
    ``TF_CONFIG``; the replicas check waits for the import), whether TensorFlow is installed
    or not. A refusal of the settings or of the cluster is raised."""
    if tensorflow.budget is None or (
        tensorflow.cluster is None
        and tensorflow.error is not None
        and tensorflow.budget.settings.cluster is not None
    ):
        raise tensorflow.error
    return None if tensorflow.cluster is None else tensorflow.cluster.to_dict()


def _launches(settings: Any, plans: Mapping[str, Any]) -> dict[str, Any]:
    """What the other installed frameworks that form a cluster get from it (TensorFlow's is
    ``_cluster``), or why they cannot (their import's error)."""
    from .frameworks import ADAPTERS

    if settings.cluster is None:
        return {}
    return {
        ADAPTERS[m].NAME: {"error": str(made.error)} if made.error else made.cluster.to_dict()
        for m, made in plans.items()
        if m != "tensorflow" and ADAPTERS[m].LAUNCH is not None
    }


def _refused(plans: Mapping[str, Any]) -> dict[str, ConfigError]:
    """The frameworks whose import would fail here, by name, with the error it raises."""
    from .frameworks import ADAPTERS

    return {ADAPTERS[m].NAME: made.error for m, made in plans.items() if made.error is not None}


def _present() -> list[str]:
    """The frameworks a budget is planned for that are installed here, by module name."""
    from .frameworks import ADAPTERS, PLANNED
    from .node.versions import installed

    return [m for m in PLANNED if installed(m, ADAPTERS[m].DISTRIBUTIONS)]


def _settings_rows(env: dict[str, str]) -> dict[str, Any]:
    """``show``'s rows, from what each framework's import would do here (``_planned``):
    TensorFlow's for the settings, the node's limits and the cluster."""
    from .budget.hostmemory import for_tensorflow
    from .settings import CONTRACT, CONTROL

    tensorflow = _planned("tensorflow", env)
    cluster = _cluster(tensorflow)
    planned = tensorflow.budget  # the settings and the node read as the import reads them
    settings = planned.settings  # every variable, as TensorFlow reads them
    table = {}
    for variable in CONTRACT + CONTROL:
        if variable.name in settings.given:
            value, source = settings.given[variable.name]
        elif env.get(variable.name, "").strip():
            value, source = env[variable.name], "env"
        else:
            value, source = SHOWN_DEFAULTS.get(variable.name, variable.default), "default"
        if isinstance(value, bool):
            value = str(value).lower()
        elif isinstance(value, str):
            value = hide_credentials(value)
        table[variable.name] = {"value": value, "source": source}
    if cluster is not None:
        from .cluster import NAMES as CLUSTER_NAMES

        unset = {"value": None, "source": "default"}
        table.update({name: cluster["given"].get(name, unset) for name in CLUSTER_NAMES})
    from .budget.caps import headroom as headroom_of
    from .frameworks import ADAPTERS
    from .node.versions import TENSORFLOW, installed

    budget, memory = planned.cpu, planned.memory
    version = installed("tensorflow", TENSORFLOW)  # what the installed TensorFlow can take
    found = for_tensorflow(planned.host(), version)
    malloc = planned.release()
    present = _present()
    plans = {m: tensorflow if m == "tensorflow" else _planned(m, env) for m in present}
    refused = _refused(plans)
    headroom = {
        ADAPTERS[m].NAME: headroom_of(settings, env, ADAPTERS[m].HEADROOM, ADAPTERS[m].NAME)
        for m in present
    }
    return {
        "settings": table,
        "cpu": {
            "schedulable": budget.affinity,
            "quota": budget.quota,
            "quota_source": budget.quota_source or None,
            "quota_shared": budget.shared or None,
            "auto_threads": budget.threads,
            "problem": budget.problem or None,
        },
        "memory": {
            "limit_mib": found.limit_mib,
            "limit_source": found.origin,
            "limit_shared": (memory.shared or None) if settings.host_memory == "auto" else None,
            "tf_data": None if found.data is None else vars(found.data),
            "malloc": None if malloc is None else malloc.why,
            "problem": memory.problem or None,
        },
        "headroom_mib": {name: room.mib for name, room in headroom.items()},
        "headroom_why": {name: room.why for name, room in headroom.items()},
        "cluster": cluster,
        "clusters": _launches(settings, plans),
        "refused": {name: str(error) for name, error in refused.items()},
    }


def _env_file(value: str) -> str:
    """An argparse type: the path of a .env file, never blank."""
    if not value.strip():
        raise argparse.ArgumentTypeError("give the path of a .env file (an empty one names none)")
    return value


def _environment(env_file: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if env_file is not None:
        env["TFBOOT_ENV_FILE"] = env_file
    return env


def _print_error(exc: ConfigError, as_json: bool) -> int:
    return _print_errors([exc], as_json)


def _print_typos(typos: list[tuple[str, str]], as_json: bool) -> int:
    """Misspelled names (``typos``), as error lines or one JSON object; no value shown."""
    hint = "rename it to the variable meant, or remove it"
    if as_json:
        problems = [{"variable": n, "value": None, "accepted": text, "hint": hint}
                    for n, text in typos]  # fmt: skip
        print(json.dumps({"ok": False, "problems": problems}))
    else:
        for _name, text in typos:
            print(line("error", f"{text}: {hint}"), file=sys.stderr)
    return 1


def _print_errors(errors: list[ConfigError], as_json: bool) -> int:
    """Each error, as an error line (or one JSON object), for the failing exit status."""
    if as_json:
        problems = [
            {"variable": p.variable, "value": p.value, "accepted": p.accepted, "hint": p.hint}
            | ({"framework": exc.framework} if exc.framework else {})
            for exc in errors
            for p in exc.problems
        ]
        print(json.dumps({"ok": False, "problems": problems}))
    else:
        for exc in errors:
            print(line("error", str(exc)), file=sys.stderr)
    return 1


def _not_started(as_json: bool) -> str | None:
    """Why the start-up hook did not run here, printed first (text output) or returned."""
    from .doctor.startup import not_started

    why = not_started()
    if why is not None and not as_json:
        print(line("warning", why))
    return why


def cmd_show(args: argparse.Namespace) -> int:
    from .budget.hostmemory import DataDefaults

    why = _not_started(args.json)
    try:
        data = _settings_rows(_environment(args.env_file))
    except ConfigError as exc:
        return _print_error(exc, args.json)
    data["startup"] = {"ran": why is None, "why": why}
    if args.json:
        print(json.dumps(data))
        return 0
    shown = {name: "unset" if row["value"] is None else str(row["value"])
             for name, row in data["settings"].items()}  # fmt: skip
    width, values = max(map(len, shown)), max(map(len, shown.values()))
    for name, row in data["settings"].items():
        print(f"{name:<{width}}  {shown[name]:<{values}}  {row['source']}")
    cpu = data["cpu"]
    quota = f"{cpu['quota']:g} CPUs from {cpu['quota_source']}" if cpu["quota"] else "none"
    quota += f" ({cpu['quota_shared']})" if cpu["quota_shared"] else ""
    print(f"\nCPU: {cpu['schedulable']} schedulable, quota {quota}", end="")
    print(f"; CPU_THREADS=auto gives {cpu['auto_threads']}" if cpu["auto_threads"] else "")
    if cpu["problem"]:
        print(f"warning: {cpu['problem']}")
    memory = data["memory"]
    limit = f"{memory['limit_mib']} MiB" if memory["limit_mib"] else "none"
    print(f"Host memory: limit {limit} ({memory['limit_source']})", end="")
    if memory["tf_data"]:
        print(f"; every tf.data pipeline gets {DataDefaults(**memory['tf_data']).describe()}")
    else:
        print("; tf.data keeps TensorFlow's defaults")
    if memory["malloc"]:
        print(f"Host memory allocator: {memory['malloc']}")
    if memory["problem"]:
        print(f"warning: {memory['problem']}")
    for name, mib in data["headroom_mib"].items():
        print(f"GPU headroom for {name}: {mib} MiB below a share ({data['headroom_why'][name]})")
    print("GPU-dependent decisions need TensorFlow's device list: run `tfboot doctor`.")
    if data["cluster"] is not None:
        print(f"\n{data['cluster']['line']}\nTF_CONFIG: {data['cluster']['tf_config']}")
    for name, found in data["clusters"].items():
        print(found.get("line") or f"{name}: {found['error']}")
    for name, error in data["refused"].items():
        print(line("error", f"the import of {name} fails here: {error}"))
    return 0


def _run_time(settings: Any, env: dict[str, str]) -> tuple[list[dict[str, str]], str]:
    """The environments of running tasks ``check`` judges, and what it left to run time: the
    engine ``DISTRIBUTED`` names puts its own in place of what its launcher sets only in a
    running task (``Engine.at_run_time``)."""
    if settings.cluster is None:
        return [env], ""
    from .cluster.engines import BY_NAME

    engine = BY_NAME.get(settings.distributed)
    return ([env], "") if engine is None else engine.at_run_time(settings.cluster, env)


def cmd_check(args: argparse.Namespace) -> int:
    from .frameworks import resolve
    from .typos import misspelled

    env = _environment(args.env_file)
    why = _not_started(args.json)
    try:
        settings = resolve(env)
        tasks, later = _run_time(settings, env)
        clusters = [_cluster(_planned("tensorflow", task)) for task in tasks]
    except ConfigError as exc:
        return _print_error(exc, args.json)
    typos = misspelled(env)
    if typos:
        return _print_typos(typos, args.json)
    cluster = clusters[-1]
    judged = [m for m in _present() if m != "tensorflow" and m in (args.framework or [m])]
    refused = _refused({module: _planned(module, tasks[0]) for module in judged})
    if refused:  # what TensorFlow refuses, resolve and the cluster raised above
        return _print_errors(list(refused.values()), args.json)
    given = rows(settings.given)
    given.update(cluster["given"] if cluster else {})
    if args.json:
        print(json.dumps({"ok": True, "settings": given, "cluster": later or None,
                          "startup": {"ran": why is None, "why": why}}))  # fmt: skip
    else:
        print(f"ok: {len(given)} tfboot variable(s) set, all valid")
        for name, row in given.items():
            print(f"  {name}={row['value']}  ({row['source']})")
        if later:
            print(f"cluster: {later}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import collect, render

    _not_started(args.json)
    asked = args.framework or ["tensorflow"]
    missing = [m for m in asked if importlib.util.find_spec(m) is None]
    if missing:  # one line, as selftest says it: no traceback for an expected condition
        from .frameworks import PLANNED

        present = [m for m in PLANNED if m not in missing and importlib.util.find_spec(m)]
        names = ", ".join(NAMES[m] for m in missing)
        other = f"--framework {' / '.join(present)}" if present else "none is installed"
        verb = "is" if len(missing) == 1 else "are"
        text = (f"doctor: {names} {verb} not installed in this environment ({sys.executable}): "
                f"install it, or ask for what is here ({other})")  # fmt: skip
        if args.json:
            print(json.dumps({"error": text, "missing": missing}))
        else:
            print(line("error", text), file=sys.stderr)
        return 2
    report = collect(verify=args.verify, frameworks=asked)
    print(json.dumps(report) if args.json else render(report))
    failed = any(not check["ok"] for check in report.get("verify", []))
    refused = any(s.get("error") for s in report["frameworks"].values())
    return 1 if report.get("error") or failed or refused else 0


def _gpu_list(value: str) -> tuple[int, ...] | None:
    from .settings import parse_visible_gpu

    try:
        chosen = parse_visible_gpu("--gpu", value)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if chosen == ():
        raise argparse.ArgumentTypeError("--gpu='none' tests nothing: give all, 1 or 0,2")
    return chosen


def _bounded(low: int, high: int, unit: str) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` to ``high``."""

    def parse(value: str) -> int:
        number = digits(value)
        if number is None or not low <= number <= high:
            raise argparse.ArgumentTypeError(
                f"{quote(value)}: expected {unit} from {low} to {high}"
            )
        return number

    return parse


_cap_mb = _bounded(MIN_CAP_MB, MAX_MEMORY_MB, "a number of MiB")
_timeout_s = _bounded(1, MAX_TIMEOUT_S, "a number of seconds")


def _row_names(value: str) -> tuple[str, ...]:
    from .selftest.rows import ROWS

    known = [row.name for row in ROWS]
    names = tuple(name.strip() for name in value.split(","))
    unknown = [name for name in names if name not in known]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"{unknown[0]!r} is not a row; the rows are {', '.join(known)}"
        )
    return names


def cmd_selftest(args: argparse.Namespace) -> int:
    from .selftest import render
    from .selftest.runner import Options, run

    def on_start(report: Any) -> None:
        print(render.header(report), flush=True)

    def on_row(result: Any) -> None:
        print(render.row_line(result), flush=True)

    options = Options(args.gpu, args.cap_mb, args.timeout, args.only or Options.rows)
    rows: Any = run
    if args.framework != "tensorflow":
        from .selftest import frameworks

        if args.only:
            print("tfboot selftest: error: --only names TensorFlow's rows", file=sys.stderr)
            return 2
        rows = partial(frameworks.run, args.framework)
    if args.json:
        report = rows(options)
        print(json.dumps(report.to_dict()))
    else:
        report = rows(options, on_start, on_row)
        if not report.gpus:
            for result in report.rows:
                print(render.row_line(result))
        print(render.summary(report))
    return report.exit_status


def build_parser() -> argparse.ArgumentParser:
    from .frameworks import PLANNED

    parser = argparse.ArgumentParser(
        prog="tfboot",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tfboot {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")

    show = commands.add_parser(
        "show", help="the settings resolved from this environment, and where each came from "
        "(imports no framework)"
    )  # fmt: skip
    check = commands.add_parser(
        "check", help="validate the environment, or a .env file; exit status 1 on any error"
    )
    for sub in (show, check):
        sub.add_argument(
            "--env-file",
            type=_env_file,
            metavar="FILE",
            help="read this .env file, as TFBOOT_ENV_FILE would",
        )
        sub.add_argument("--json", action="store_true", help="print JSON")
    check.add_argument(
        "--framework",
        action="append",
        choices=PLANNED,
        help="judge the imports of this framework only (repeatable; default: every framework "
        "installed here, as the image may import any of them)",
    )
    show.set_defaults(func=cmd_show)
    check.set_defaults(func=cmd_check)

    doctor = commands.add_parser(
        "doctor", help="import the frameworks, apply, and report the devices, memory and "
        "threads each sees"
    )  # fmt: skip
    doctor.add_argument("--json", action="store_true", help="print one JSON object")
    doctor.add_argument(
        "--verify",
        action="store_true",
        help="fill each capped logical GPU up to its cap and check the next allocation fails",
    )
    doctor.add_argument(
        "--framework",
        action="append",
        choices=PLANNED,
        help="import this framework and report what it got (repeatable; default tensorflow); "
        "JAX and PyTorch are imported first, as Keras on them would",
    )
    doctor.set_defaults(func=cmd_doctor)

    selftest = commands.add_parser(
        "selftest",
        help="check each GPU row of the contract on this node, one fresh process per row "
        "(exit 0 passed or skipped, 1 a row failed, 3 no GPU)",
        description="Check each GPU row of the contract on this node (VISIBLE_GPU, "
        "MEMORY_LIMIT_MB, VIRTUAL_SPLIT, MEMORY_GROWTH, growth under a cap, the "
        "cuda_malloc_async warning, REQUIRE_GPU, XLA_JIT), each in a fresh Python process, "
        "and print "
        "PASS, FAIL or SKIP per row with the numbers seen. Run it after a driver or image "
        "upgrade. Exit status: 0 every row passed or was skipped, 1 a row failed or "
        "TensorFlow could not start, 2 bad options, 3 TensorFlow lists no GPU.",
    )
    selftest.add_argument("--json", action="store_true", help="print one JSON object")
    selftest.add_argument(
        "--gpu",
        type=_gpu_list,
        default=None,
        metavar="all|N|N,M",
        help="GPUs to test, indexes in TensorFlow's list (default: all)",
    )
    selftest.add_argument(
        "--cap-mb",
        type=_cap_mb,
        default=1024,
        metavar="MIB",
        help="the cap the cap rows set and fill, in MiB (default 1024; keep it well below "
        "the GPU's memory)",
    )
    selftest.add_argument(
        "--timeout",
        type=_timeout_s,
        default=180,
        metavar="SECONDS",
        help="time one row may take before it counts as failed (default 180)",
    )
    selftest.add_argument(
        "--only",
        type=_row_names,
        metavar="ROW[,ROW]",
        help="run only these rows, such as memory_limit,virtual_split (default: all)",
    )
    selftest.add_argument(
        "--framework",
        choices=PLANNED,
        default="tensorflow",
        help="whose rows: TensorFlow's (default), or JAX's or PyTorch's visibility, cap "
        "and growth rows",
    )
    selftest.set_defaults(func=cmd_selftest)

    from . import manifests as checker

    manifests = commands.add_parser(
        "manifests",
        help="check Kubernetes manifests (files, folders, or - for stdin): env against "
        "resource limits, security context",
        description=checker.DESCRIPTION,
        epilog=checker.EPILOG,
    )
    checker.add_arguments(manifests)
    manifests.set_defaults(func=checker.run)

    from .inject import command as injector

    for name, text, undo in (("inject", injector.DESCRIPTION, False),
                             ("uninject", injector.UNDO, True)):  # fmt: skip
        what = (
            "take out what inject added"
            if undo
            else "add tfboot to the Pod templates of manifests, no image rebuilt"
        )
        sub = commands.add_parser(name, help=what, description=text)  # fmt: skip
        injector.add_arguments(sub, undo)
        sub.set_defaults(func=injector.run)

    from . import suggestcmd

    suggested = commands.add_parser(
        "suggest",
        help="what to set next time, from usage files (TFBOOT_USAGE_FILE)",
        description=suggestcmd.__doc__.split("\n\n")[1].replace("\n", " "),
    )
    suggestcmd.add_arguments(suggested)
    suggested.set_defaults(func=suggestcmd.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # The reader went away (`tfboot show | head -1`): stop quietly, as other tools do.
        # stdout is pointed at devnull so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by the signal


def _run(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return int(args.func(args))

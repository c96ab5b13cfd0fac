"""Parse and validate the env contract into ``Settings``; no TensorFlow here.

Precedence: process environment > ``TFBOOT_ENV_FILE`` > device-plugin variables
(``MEMORY_LIMIT_MB=auto``) > defaults. An empty value counts as unset. Every invalid
value is collected, then raised together as one ``ConfigError``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .cluster import MODES, NAMES
from .errors import AUTO_WITHOUT_SHARE, ON_THIS_HOST, ConfigError, Problem, bounded
from .node.deviceplugin import PluginLimit, auto_without_share, read_plugin_limit
from .node.hostmem import MAX_POD_MIB, POD_MEMORY_VARIABLE
from .provenance import user_value
from .values import digits, hide_credentials, nonblank, positive, shorten

HEADROOM = "MEMORY_HEADROOM_MB"  # what a framework keeps free below a GPU share (budget.caps)

BOOL_WORDS = {"true": True, "1": True, "yes": True, "on": True,
              "false": False, "0": False, "no": False, "off": False}  # fmt: skip
BOOL_ACCEPTED = "expected true/false (also 1/0, yes/no, on/off)"
MAX_SPLIT = 64
# 1 TiB per GPU: more than any GPU has, and far inside TensorFlow's byte count (int64).
MAX_MEMORY_MB = 1 << 20
# Threads per pool. TensorFlow's first op takes 0.07 s with 64, 0.4 s with 1024, 1.4 s with
# 4096, and aborts with 16384 (bench/thread_ceiling.py); no machine has more CPUs than this.
MAX_CPU_THREADS = 1024
PRECISION_POLICIES = ("mixed_float16", "mixed_bfloat16", "float32")
# 16 TiB: more memory than any host has.
MAX_HOST_MEMORY_MB = 1 << 24

# Variables that control tfboot itself: read from the process environment only.
DISABLE = "TFBOOT_DISABLE"
ENV_FILE = "TFBOOT_ENV_FILE"
ON_ERROR = "TFBOOT_ON_ERROR"
LOG = "TFBOOT_LOG"
POD_MEMORY = POD_MEMORY_VARIABLE  # the Pod's limits.memory, where it is the container's budget
# The usage report's (tfboot.usage): also read from the process environment only.
USAGE = "TFBOOT_USAGE"
USAGE_FILE = "TFBOOT_USAGE_FILE"
USAGE_INTERVAL = "TFBOOT_USAGE_INTERVAL"
TERMINATION_LOG = "TFBOOT_TERMINATION_LOG"
TEXTFILE_DIR = "TFBOOT_TEXTFILE_DIR"
PUSHGATEWAY = "TFBOOT_PUSHGATEWAY"
METRICS_JOB = "TFBOOT_METRICS_JOB"
MAX_INTERVAL_S = 86400  # a day between snapshots: a longer wait is no snapshot at all
MAX_LABEL = 128

if TYPE_CHECKING:
    from .cluster.variables import ClusterSettings

CpuThreads = str | int  # "auto", "host" or a positive count
Split = int | tuple[int, ...]  # N logical devices, or their MiB sizes


def _word(value: str) -> str:
    return value.strip().lower()


def parse_bool(name: str, value: str) -> bool:
    """``true``/``false`` and their usual spellings, case-insensitive."""
    try:
        return BOOL_WORDS[_word(value)]
    except KeyError:
        raise ConfigError(Problem(name, value, BOOL_ACCEPTED)) from None


def _choice(*words: str) -> Callable[[str, str], str]:
    accepted = "expected one of " + ", ".join(words)

    def parse(name: str, value: str) -> str:
        if _word(value) not in words:
            raise ConfigError(Problem(name, value, accepted))
        return _word(value)

    return parse


def parse_visible_gpu(name: str, value: str) -> tuple[int, ...] | None:
    """``all`` -> None, ``none`` -> (), ``1`` or ``0,2`` -> indexes (no repeats)."""
    accepted = "expected all, none, a GPU index such as 1, or a list such as 0,2"
    word = _word(value)
    if word == "all":
        return None
    if word == "none":
        return ()
    parts = [p.strip() for p in value.split(",")]
    numbers = [digits(p) for p in parts]
    if None in numbers:
        raise ConfigError(Problem(name, value, accepted))
    indexes = tuple(n for n in numbers if n is not None)
    repeated = sorted({i for i in indexes if indexes.count(i) > 1})
    if repeated:
        raise ConfigError(
            Problem(name, value, accepted, f"index {repeated[0]} is listed more than once")
        )
    return indexes


MEMORY_ACCEPTED = (
    f"expected a number of MiB from 1 to {MAX_MEMORY_MB} (1 TiB, more than any GPU has) "
    "such as 6144"
)


def parse_memory_limit(name: str, value: str) -> int | str:
    """A positive number of MiB, or ``auto`` (take the device plugin's share)."""
    if _word(value) == "auto":
        return "auto"
    number = positive(value)
    if number is None or number > MAX_MEMORY_MB:
        raise ConfigError(Problem(name, value, MEMORY_ACCEPTED + ", or auto"))
    return number


def parse_headroom(name: str, value: str) -> int:
    """MiB from 0 to 1 TiB: what a GPU share keeps free beside the framework's pool."""
    number = digits(value.strip())
    if number is None or number > MAX_MEMORY_MB:
        raise ConfigError(
            Problem(name, value, f"expected a number of MiB from 0 to {MAX_MEMORY_MB} such as 1024")
        )
    return number


def parse_split(name: str, value: str) -> Split:
    """``N`` (1..64) logical devices per GPU, or their MiB sizes ``2048,2048,4096``."""
    accepted = (
        f"expected a count from 1 to {MAX_SPLIT} such as 2, or a list of up to {MAX_SPLIT} "
        f"MiB sizes from 1 to {MAX_MEMORY_MB} (1 TiB) such as 2048,2048,4096"
    )
    if "," not in value:
        count = positive(value)
        if count is None or count > MAX_SPLIT:
            hint = (
                f"for one logical GPU of {count} MiB use MEMORY_LIMIT_MB={count}"
                if count is not None and count <= MAX_MEMORY_MB
                else ""
            )
            raise ConfigError(Problem(name, value, accepted, hint))
        return count
    sizes = tuple(positive(part) for part in value.split(","))
    if any(s is None or s > MAX_MEMORY_MB for s in sizes) or len(sizes) > MAX_SPLIT:
        raise ConfigError(Problem(name, value, accepted))
    return tuple(s for s in sizes if s is not None)


def _auto_host_or_count(name: str, value: str, high: int, what: str, hint: str = "") -> str | int:
    """``auto``, ``host``, or a whole number from 1 to ``high`` (``what`` names it)."""
    word = _word(value)
    if word in ("auto", "host"):
        return word
    number = positive(value)
    if number is None or number > high:
        accepted = f"expected auto, host or {what.format(high=high)}"
        raise ConfigError(Problem(name, value, accepted, hint if number else ""))
    return number


def parse_cpu_threads(name: str, value: str) -> CpuThreads:
    """``auto`` (CPU quota), ``host`` (TensorFlow's default) or a positive count."""
    return _auto_host_or_count(
        name,
        value,
        MAX_CPU_THREADS,
        "a thread count from 1 to {high}",
        "TensorFlow starts this many threads per pool: with 4096 its first op takes "
        "seconds, with 16384 it aborts",
    )


def parse_host_memory(name: str, value: str) -> str | int:
    """``auto`` (the container's memory limit), ``host`` (TensorFlow's default) or MiB."""
    return _auto_host_or_count(
        name, value, MAX_HOST_MEMORY_MB, "a number of MiB from 1 to {high} (16 TiB) such as 4096"
    )


@dataclass(frozen=True)
class Variable:
    """One configuration variable of the contract."""

    name: str
    parse: Callable[[str, str], Any]
    accepted: str
    default: Any
    # "gpu": a GPU setting (not applied without a GPU); "devices": it needs the device list
    needs: str = ""


CONTRACT: tuple[Variable, ...] = (
    Variable("VISIBLE_GPU", parse_visible_gpu, "all | none | index | i,j,...", None, "gpu"),
    Variable("MEMORY_LIMIT_MB", parse_memory_limit, f"MiB 1..{MAX_MEMORY_MB} | auto", None, "gpu"),
    Variable("VIRTUAL_SPLIT", parse_split, f"N (1..{MAX_SPLIT}) | MiB sizes a,b,...", 1, "devices"),
    Variable("MEMORY_GROWTH", parse_bool, "bool", None, "gpu"),
    Variable(HEADROOM, parse_headroom, f"MiB 0..{MAX_MEMORY_MB}", None),
    Variable("CPU_THREADS", parse_cpu_threads, f"auto | host | 1..{MAX_CPU_THREADS}", "auto"),
    Variable(
        "HOST_MEMORY_LIMIT_MB",
        parse_host_memory,
        f"auto | host | MiB 1..{MAX_HOST_MEMORY_MB}",
        "auto",
    ),
    Variable("HOST_MEMORY_RELEASE", parse_bool, "bool", True),
    Variable("SOFT_PLACEMENT", parse_bool, "bool", None),
    Variable("LOG_DEVICE_PLACEMENT", parse_bool, "bool", None),
    Variable("XLA_JIT", parse_bool, "bool", None),
    Variable("MIXED_PRECISION", _choice(*PRECISION_POLICIES), " | ".join(PRECISION_POLICIES), None),
    Variable("REQUIRE_GPU", parse_bool, "bool", False, "devices"),
    Variable("DISTRIBUTED", _choice(*MODES), " | ".join(MODES), "off"),
    Variable("LOADER_GPU", parse_bool, "bool", False),
)


def _path(_name: str, value: str) -> str:
    """A path, as given (blanks around it removed)."""
    return value.strip()


def _path_or_off(name: str, value: str) -> str | None:
    """``off`` -> None, else a path."""
    return None if _word(value) == "off" else _path(name, value)


def _pod_memory(name: str, value: str) -> int:
    return bounded(name, value, 1, MAX_POD_MIB, "MiB (the Downward API's limits.memory, "
                   "divisor 1Mi)")  # fmt: skip


def _interval(name: str, value: str) -> int:
    return bounded(name, value, 1, MAX_INTERVAL_S, "whole seconds")


def _url(name: str, value: str) -> str:
    """An http(s) URL with a host, such as http://pushgateway:9091. A user name and password
    in it (``https://user:secret@host``) are sent as basic auth and never printed."""
    from urllib.parse import urlsplit

    accepted = "expected an http:// or https:// URL with a host, such as http://pushgateway:9091"
    shown = hide_credentials(value)  # an error's JSON carries the value too
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - a port out of range raises here
    except ValueError:
        raise ConfigError(Problem(name, shown, accepted)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(Problem(name, shown, accepted))
    return value.strip()


def _label(name: str, value: str) -> str:
    """A Prometheus label value: printable, at most ``MAX_LABEL`` characters."""
    text = value.strip()
    if len(text) > MAX_LABEL or not text.isprintable():
        raise ConfigError(
            Problem(name, value, f"expected a name of at most {MAX_LABEL} printable characters")
        )
    return text


CONTROL: tuple[Variable, ...] = (
    Variable(DISABLE, parse_bool, "bool", False),
    Variable(ENV_FILE, lambda _name, value: value.strip(), "path of a .env file", None),
    Variable(ON_ERROR, _choice("raise", "warn"), "raise | warn", "raise"),
    Variable(LOG, _choice("quiet", "info", "debug"), "quiet | info | debug", "info"),
    Variable(POD_MEMORY, _pod_memory, f"MiB 1..{MAX_POD_MIB}", None),
    Variable(USAGE, parse_bool, "bool", True),
    Variable(USAGE_FILE, _path, "path of the JSON usage file", None),
    Variable(USAGE_INTERVAL, _interval, f"seconds 1..{MAX_INTERVAL_S}", 30),
    Variable(TERMINATION_LOG, _path_or_off, "path | off", "/dev/termination-log"),
    Variable(TEXTFILE_DIR, _path, "directory of node-exporter's textfile collector", None),
    Variable(PUSHGATEWAY, _url, "http(s) URL of a Pushgateway", None),
    Variable(METRICS_JOB, _label, f"up to {MAX_LABEL} printable characters", "tfboot"),
)
CONTRACT_NAMES = frozenset(v.name for v in CONTRACT)
# The GPU settings, named when no GPU is found; with the others that need the device list,
# the settings for which a framework lists its devices (without them it never does).
GPU_SETTINGS = tuple(v.name for v in CONTRACT if v.needs == "gpu")
DEVICE_SETTINGS = tuple(v.name for v in CONTRACT if v.needs)
ALL_NAMES = CONTRACT_NAMES | {v.name for v in CONTROL}
# What a TFBOOT_ENV_FILE may set: the contract and the cluster variables (DIST_*).
FILE_NAMES = CONTRACT_NAMES | frozenset(NAMES)


@dataclass(frozen=True)
class Control:
    """tfboot's own variables (``TFBOOT_*``), read from the process environment only."""

    disable: bool = False
    env_file: str | None = None
    on_error: str = "raise"
    log: str = "info"


@dataclass(frozen=True)
class Settings:
    """The validated configuration, with where each value came from."""

    visible_gpu: tuple[int, ...] | None = None
    memory_limit_mb: int | None = None
    memory_limit_per_gpu: dict[int, int] = field(default_factory=dict)
    virtual_split: Split = 1
    memory_growth: bool | None = None
    cpu_threads: CpuThreads = "auto"
    host_memory: str | int = "auto"  # "auto", "host" or MiB
    host_memory_release: bool = True  # glibc's malloc returns freed memory under a limit
    # The share a device plugin gave, read under MEMORY_LIMIT_MB=auto (a fact: the caps
    # below it are each framework's, ``budget.caps``); None: no share, or a number given.
    share: PluginLimit | None = None
    memory_headroom_mb: int | None = None  # MEMORY_HEADROOM_MB; None: the framework's own
    soft_placement: bool | None = None
    log_device_placement: bool | None = None
    xla_jit: bool | None = None
    mixed_precision: str | None = None
    require_gpu: bool = False
    distributed: str = "off"
    loader_gpu: bool = False  # TensorFlow beside JAX or PyTorch keeps the GPUs
    control: Control = field(default_factory=Control)
    # The DIST_* variables, parsed when DISTRIBUTED is not off; None under off.
    cluster: ClusterSettings | None = None
    # variable -> (raw value, source) for every contract variable that was given
    given: dict[str, tuple[str, str]] = field(default_factory=dict)

    def source(self, name: str) -> str:
        """Where ``name``'s value came from: env, file PATH, a device plugin, or default."""
        return self.given[name][1] if name in self.given else "default"

    def shown(self, name: str) -> str:
        """``NAME=value (source)``: how a decision names the variable behind it."""
        value, source = self.given[name]
        return f"{name}={value} ({source})"

    def device_given(self) -> bool:
        """True when a setting depends on the GPU list (a GPU setting or a split)."""
        return any(name in self.given for name in DEVICE_SETTINGS)

    def caps_mb(self, gpu_index: int) -> int | None:
        """The cap for physical GPU ``gpu_index`` (its position in TF's list)."""
        return self.memory_limit_per_gpu.get(gpu_index, self.memory_limit_mb)


def _read(variables: tuple[Variable, ...], env: Mapping[str, str], name: str) -> Any:
    variable = next(v for v in variables if v.name == name)
    value = nonblank(env, name)
    return variable.default if value is None else variable.parse(name, value)


def parse_variable(env: Mapping[str, str], name: str) -> Any:
    """One contract variable from ``env`` through its own parser; its default when unset."""
    return _read(CONTRACT, env, name)


def read_control(env: Mapping[str, str], name: str) -> Any:
    """Parse one of tfboot's own control variables (``TFBOOT_*``) from ``env``."""
    return _read(CONTROL, env, name)


def disabled(env: Mapping[str, str] | None = None) -> bool:
    """True when the kill switch ``TFBOOT_DISABLE`` is on (an invalid value is not)."""
    try:
        return bool(read_control(os.environ if env is None else env, DISABLE))
    except ConfigError:
        return False  # reported with the other problems by resolve()


@dataclass
class _Given:
    """The variables given, process environment over the file, and how to name a bad one."""

    values: dict[str, tuple[str, str]] = field(default_factory=dict)
    # name -> "line N of PATH" for a value from the file: never quoted in a message
    from_file: dict[str, str] = field(default_factory=dict)

    def parse(self, name: str, parse: Callable[[str, str], Any], accepted: str) -> Any:
        """Parse a given value; one from the file is named by its line when it is invalid."""
        try:
            return parse(name, self.values[name][0])
        except ConfigError:
            where = self.from_file.get(name)
            if where is None:
                raise
            raise ConfigError(
                Problem(name, None, f"the value on {where} is invalid: expected {accepted}")
            ) from None


def _layer(env: Mapping[str, str], path: str | None) -> _Given:
    """The contract's and cluster's variables in the process env over the file's."""
    given = _Given()
    if path is not None:
        from .envfile import read_env_file

        for name, entry in read_env_file(path, FILE_NAMES, env).items():
            given.values[name] = (entry.value, f"file {path}")
            how = " (after ${...} interpolation)" if entry.interpolated else ""
            given.from_file[name] = f"line {entry.line} of {path}{how}"
    for name in FILE_NAMES:
        value = nonblank(env, name)
        if value is not None:
            given.values[name] = (value, "env")
            given.from_file.pop(name, None)
    return given


def _control(env: Mapping[str, str], problems: list[Problem]) -> Control:
    values = {}
    for variable in CONTROL:
        try:
            values[variable.name] = read_control(env, variable.name)
        except ConfigError as exc:
            problems += exc.problems
            values[variable.name] = variable.default
    return Control(values[DISABLE], values[ENV_FILE], values[ON_ERROR], values[LOG])


def resolve(
    env: Mapping[str, str] | None = None,
    names: Collection[str] | None = None,
    mirrors: Mapping[str, str] | None = None,
) -> Settings:
    """Validate the contract in one pass; raise one ``ConfigError`` listing every problem.

    ``names``: the contract variables to read, None for all (JAX and PyTorch read those
    they apply or refuse; the others keep their defaults and are not checked);
    ``mirrors``: contract variable -> the framework's own variable for the same setting
    (TensorFlow's ``TF_FORCE_GPU_ALLOW_GROWTH`` for ``MEMORY_GROWTH``): a user's value of it
    that contradicts the contract's is a problem. ``MEMORY_LIMIT_MB=auto`` reads the device
    plugin's share as a fact (``Settings.share``); each framework's cap below it is the
    budget's (``budget.caps``). The ``TFBOOT_ENV_FILE`` file is read once; with every
    variable read and ``DISTRIBUTED`` other than ``off`` the cluster variables are parsed
    too (``Settings.cluster``).
    """
    env = os.environ if env is None else env
    problems: list[Problem] = []
    control = _control(env, problems)
    try:
        layered = _layer(env, control.env_file)
    except ConfigError as exc:
        raise ConfigError(problems + exc.problems) from None
    given = {
        k: v for k, v in layered.values.items() if k in (CONTRACT_NAMES if names is None else names)
    }

    values: dict[str, Any] = {}
    for variable in CONTRACT:
        values[variable.name] = variable.default
        if variable.name in given:
            try:
                values[variable.name] = layered.parse(
                    variable.name, variable.parse, variable.accepted
                )
            except ConfigError as exc:
                problems += exc.problems

    cluster = None
    if values["DISTRIBUTED"] != "off" and (names is None or "DISTRIBUTED" in names):
        from .cluster.variables import read_cluster

        try:
            cluster = read_cluster(layered.values, layered.parse)
        except ConfigError as exc:
            problems += exc.problems
    share = None
    if values.get("MEMORY_LIMIT_MB") == "auto":
        before = len(problems)
        share = read_plugin_limit(env, problems)
        values["MEMORY_LIMIT_MB"] = None
        if share is None and len(problems) == before:  # else a plugin variable says so
            missing, hint = auto_without_share(env)
            problems.append(Problem("MEMORY_LIMIT_MB", given["MEMORY_LIMIT_MB"][0], missing, hint,
                                    kind=AUTO_WITHOUT_SHARE))  # fmt: skip

    problems += _cross_checks(env, values, given, mirrors or {})
    if problems:
        raise ConfigError(problems)
    return Settings(
        visible_gpu=values["VISIBLE_GPU"],
        memory_limit_mb=values["MEMORY_LIMIT_MB"],
        virtual_split=values["VIRTUAL_SPLIT"],
        memory_growth=values["MEMORY_GROWTH"],
        cpu_threads=values["CPU_THREADS"],
        host_memory=values["HOST_MEMORY_LIMIT_MB"],
        host_memory_release=values["HOST_MEMORY_RELEASE"],
        share=share,
        memory_headroom_mb=values[HEADROOM],
        soft_placement=values["SOFT_PLACEMENT"],
        log_device_placement=values["LOG_DEVICE_PLACEMENT"],
        xla_jit=values["XLA_JIT"],
        mixed_precision=values["MIXED_PRECISION"],
        require_gpu=values["REQUIRE_GPU"],
        distributed=values["DISTRIBUTED"],
        loader_gpu=values["LOADER_GPU"],
        control=control,
        cluster=cluster,
        given=given,
    )


def split_shown(split: Split) -> str:
    """``VIRTUAL_SPLIT``'s value as parsed, as a message quotes it: ``2`` or ``2048,2048``."""
    return ",".join(map(str, split)) if isinstance(split, tuple) else str(split)


def split_count(split: Split) -> int:
    """The logical devices ``VIRTUAL_SPLIT`` makes of each GPU (or of CPU:0 without one)."""
    return len(split) if isinstance(split, tuple) else split


def split_fit(split: Split, cap: int | None, value: str,
              gpu: int | None = None) -> tuple[tuple[int, ...], Problem | None]:  # fmt: skip
    """The one rule of ``VIRTUAL_SPLIT``: the logical devices' MiB sizes ``split`` (given as
    ``value``) makes of a cap of ``cap`` MiB (None: no cap), and the problem where it cannot:
    sizes that add up to more than the cap, more logical GPUs than MiB to share, or a count
    with no cap to divide.

    ``gpu``: the GPU whose cap it is, as a plan judges each GPU it lists; None: the caps
    ``MEMORY_LIMIT_MB`` gives, judged before any GPU is listed (``split_problems``), where a
    count without a cap is no problem yet (a host without GPUs needs none).
    """
    if isinstance(split, tuple):
        if cap is None or sum(split) <= cap:
            return split, None
        whose, hint = f"GPU:{gpu}'s cap of {cap} MiB", ""
        if gpu is None:
            whose = f"the cap of {cap} MiB (MEMORY_LIMIT_MB)"
            hint = "make the sizes fit the cap, or raise MEMORY_LIMIT_MB"
        added = f"the sizes add up to {sum(split)} MiB, more than {whose}"
        return (), Problem("VIRTUAL_SPLIT", value, added, hint)
    if cap is None:
        if split == 1 or gpu is None:
            return (), None
        return (), Problem(
            "VIRTUAL_SPLIT",
            value,
            f"splitting GPU:{gpu} into {split} logical GPUs needs a memory cap "
            "to divide, and MEMORY_LIMIT_MB is not set",
            f"set MEMORY_LIMIT_MB (each logical GPU gets MEMORY_LIMIT_MB // {split}), "
            "MEMORY_LIMIT_MB=auto under a GPU-sharing plugin, or give sizes such as "
            "VIRTUAL_SPLIT=2048,2048",
            verdict=ON_THIS_HOST,
        )
    if cap < split:
        whose = "a cap" if gpu is None else f"GPU:{gpu}'s cap"
        return (), Problem(
            "VIRTUAL_SPLIT", value, f"{split} logical GPUs cannot share {whose} of {cap} MiB"
        )
    return (cap // split,) * split, None


def split_problems(split: Split, caps: Collection[int | None]) -> list[Problem]:
    """``VIRTUAL_SPLIT`` against the smallest of ``caps`` (None: no cap there), by
    ``split_fit``, as the contract is read."""
    known = [c for c in caps if isinstance(c, int)]
    if not known:
        return []
    problem = split_fit(split, min(known), split_shown(split))[1]
    return [problem] if problem is not None else []


def _cross_checks(
    env: Mapping[str, str],
    values: dict[str, Any],
    given: dict[str, tuple[str, str]],
    mirrors: Mapping[str, str],
) -> list[Problem]:
    """Checks between variables that need no device list: ``VIRTUAL_SPLIT`` against a cap
    given as a number, and each contract variable against the user's value of the
    framework's own variable that ``mirrors`` it (blank is unset, as the framework reads
    it; a value tfboot or a framework wrote is not the user's)."""
    problems = split_problems(values["VIRTUAL_SPLIT"], [values.get("MEMORY_LIMIT_MB")])
    for name, theirs in mirrors.items():
        value = values.get(name)
        forced = user_value(env, theirs)
        if value is not None and forced is not None and forced != str(value).lower():
            problems.append(
                Problem(
                    name,
                    given[name][0],
                    f"it contradicts {theirs}={shorten(forced)}",
                    "set only one of them",
                )
            )
    return problems

"""The visible-device lists, parsed in one place: ``CUDA_VISIBLE_DEVICES`` and the NVIDIA
container runtime's ``NVIDIA_VISIBLE_DEVICES``.

Each is a comma-separated list of GPU indexes, UUIDs (``GPU-...``) and MIG instances
(``MIG-...``); the runtime's also takes a word, ``all``, ``none`` or ``void``, for no list.
``CUDA_VISIBLE_DEVICES`` decides where it is set, as in CUDA.

The readers differ, and one parse gives each what it needs:

- what CUDA lists (``DeviceList.cuda``, read by ``node.cuda`` from the value before tfboot
  narrowed it): entries in order up to the first CUDA cannot use (a blank, a negative, an
  index past the GPUs there), so a blank value lists no device, as CUDA takes it;
- what the container sees (``device_lists``: the MIG slices, how many GPUs NCCL will
  join): the variables as they are, a blank value as unset, as the contract takes every
  variable; a word names no device, and ``visible_count`` looks past it to the runtime's.

Nothing here raises or reads a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

CUDA_VISIBLE = "CUDA_VISIBLE_DEVICES"
NVIDIA_VISIBLE = "NVIDIA_VISIBLE_DEVICES"  # how the NVIDIA runtime lists a container's GPUs
VARIABLES = (CUDA_VISIBLE, NVIDIA_VISIBLE)  # CUDA's first: it decides where set
WORDS = ("all", "none", "void")  # the runtime's words for no list


@dataclass(frozen=True)
class DeviceList:
    """One visible-device variable's value, parsed."""

    variable: str
    entries: tuple[str, ...]  # each entry stripped, in order, blanks where they stand
    word: str = ""  # all, none or void (lower case) where the value is one of WORDS

    @property
    def named(self) -> list[str]:
        """The entries that name a device (no blank)."""
        return [entry for entry in self.entries if entry]

    @property
    def migs(self) -> list[str]:
        """The MIG instances (``MIG-`` UUIDs) it names."""
        return [entry for entry in self.entries if entry.startswith("MIG-")]

    def cuda(self, gpu_count: int) -> list[str]:
        """What CUDA lists of it on a host of ``gpu_count`` GPUs: the entries up to the
        first it cannot use."""
        listed: list[str] = []
        for entry in self.entries:
            if not entry or entry.startswith("-") or (entry.isdigit() and int(entry) >= gpu_count):
                break
            listed.append(entry)
        return listed


def parse_devices(variable: str, value: str) -> DeviceList:
    """``value`` of ``variable`` (one of ``VARIABLES``) as a list."""
    word = value.strip().lower()
    return DeviceList(variable, tuple(e.strip() for e in value.split(",")),
                      word if word in WORDS else "")  # fmt: skip


def device_lists(env: Mapping[str, str]) -> list[DeviceList]:
    """Each visible-device variable set in ``env`` (blank: unset), CUDA's first."""
    return [parse_devices(name, env[name]) for name in VARIABLES if env.get(name, "").strip()]


def mig_instances(env: Mapping[str, str]) -> list[str]:
    """The MIG instances the variable that decides names (CUDA's where set, as in CUDA)."""
    lists = device_lists(env)
    return lists[0].migs if lists else []


def visible_count(env: Mapping[str, str]) -> int | None:
    """How many devices the first list of ``env`` names (a word is none: the next one
    decides); None where none does."""
    listed = next((found for found in device_lists(env) if not found.word), None)
    return None if listed is None else len(listed.named)

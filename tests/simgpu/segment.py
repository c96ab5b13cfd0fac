"""Read the simulated GPU's shared accounting: one POSIX shared-memory segment per device.

``sim.c`` keeps each device's used bytes and its holders (pid, start time, bytes, peak)
in ``/dev/shm/simgpu-<namespace>-<ordinal>``; this module reads that layout (keep it in
step with ``ShmDevice`` there). Reads take no lock: each field is one aligned 64-bit
word, and a holder whose process died stays listed until the next process that uses
the device drops it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

SHM_DIR = Path("/dev/shm")
MAGIC = 0x31555047474D4953
_HEADER = struct.Struct("<6Q")  # magic, total, used, peak, reclaimed_bytes, reclaimed_holders
_HOLDER = struct.Struct("<iIQQQ")  # pid, unused, start, bytes, peak
_HOLDERS_AT = 128
_HOLDERS = 64


@dataclass(frozen=True)
class Holder:
    """One process attached to the device."""

    pid: int
    bytes: int
    peak: int


@dataclass(frozen=True)
class DeviceAccount:
    """A simulated device's shared accounting, as last written."""

    total: int
    used: int
    peak: int
    reclaimed_bytes: int
    reclaimed_holders: int
    holders: tuple[Holder, ...]


def segment_path(namespace: str, ordinal: int = 0) -> Path:
    """Where the segment of device ``ordinal`` in ``namespace`` lives."""
    return SHM_DIR / f"simgpu-{namespace}-{ordinal}"


def read_account(namespace: str, ordinal: int = 0) -> DeviceAccount:
    """The accounting of device ``ordinal`` in ``namespace`` (FileNotFoundError if never used)."""
    data = segment_path(namespace, ordinal).read_bytes()
    magic, total, used, peak, reclaimed_bytes, reclaimed_holders = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ValueError(f"{segment_path(namespace, ordinal)}: not a simulated-GPU segment")
    holders = []
    for i in range(_HOLDERS):
        pid, _, _, held, held_peak = _HOLDER.unpack_from(data, _HOLDERS_AT + i * _HOLDER.size)
        if pid:
            holders.append(Holder(pid, held, held_peak))
    return DeviceAccount(total, used, peak, reclaimed_bytes, reclaimed_holders, tuple(holders))


def remove_segments(namespace: str) -> None:
    """Delete every device segment of ``namespace`` (processes still attached keep theirs)."""
    for path in SHM_DIR.glob(f"simgpu-{namespace}-*"):
        path.unlink(missing_ok=True)

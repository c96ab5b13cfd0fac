"""Prove a GPU memory cap by filling each capped logical GPU (``doctor --verify``, ``selftest``).

For each logical GPU with a cap, allocate tensors on it in a few large blocks
until (almost) the whole cap is held, then ask for one more block that cannot
fit: a working cap makes that allocation fail with ``ResourceExhaustedError``
(``InternalError`` for a failed copy). Everything is freed afterwards. TF's BFC
allocator waits about 10 s before it reports an out-of-memory, so the fill uses
blocks that shrink geometrically and the only failure expected is the probe:
about 10 s per capped device.

The caller passes the imported ``tf`` module, so this module never imports
TensorFlow itself, and must call it after tfboot applied its configuration (it
starts TensorFlow's runtime).
"""

from __future__ import annotations

from typing import Any

MIB = 1 << 20
# Fraction of the cap that must be fillable before the probe for the cap to be
# called enforced (the BFC allocator rounds and may fragment a little).
MIN_FILL = 0.9
FIRST_BLOCKS = 7  # blocks of 1/8 of the free room, then halving


def _block_sizes(free_bytes: int) -> list[int]:
    """Block sizes in bytes (whole MiB) that add up to a little under ``free_bytes``."""
    room = free_bytes - MIB  # slack for rounding and allocator bookkeeping
    eighth = (room // 8) // MIB * MIB
    sizes = [eighth] * FIRST_BLOCKS if eighth else []
    left = room - sum(sizes)
    while left >= MIB:
        block = max(MIB, (left // 2) // MIB * MIB)
        sizes.append(block)
        left -= block
    return sizes


def _allocate(tf: Any, device: str, size: int) -> Any:
    with tf.device(device):
        return tf.zeros([size // 4], dtype=tf.float32)


def _out_of_memory(tf: Any) -> tuple[type[BaseException], ...]:
    return (tf.errors.ResourceExhaustedError, tf.errors.InternalError)


def _used_bytes(tf: Any, device: str) -> int:
    return int(tf.config.experimental.get_memory_info(device)["current"])


def _verify_one(tf: Any, device: str, limit_mb: int) -> dict[str, Any]:
    cap = limit_mb * MIB
    held: list[Any] = []
    failed_during_fill = False
    try:
        for size in _block_sizes(cap - _used_bytes(tf, device)):
            try:
                held.append(_allocate(tf, device, size))
            except _out_of_memory(tf):
                failed_during_fill = True
                break
        in_use = _used_bytes(tf, device)
        if failed_during_fill:
            next_failed = True
        else:
            try:
                # At least 1 MiB: the allocator's rounding may already have passed the cap.
                held.append(_allocate(tf, device, max(MIB, cap - in_use + MIB)))
                next_failed = False
            except _out_of_memory(tf):
                next_failed = True
    finally:
        allocated = sum(int(t.shape[0]) * 4 for t in held)
        del held
    filled = in_use >= MIN_FILL * cap
    ok = next_failed and filled
    if ok:
        detail = f"held {in_use // MIB} MiB of {limit_mb} MiB; one more block was refused"
    elif not next_failed:
        detail = (
            f"an allocation past the {limit_mb} MiB cap succeeded with {in_use // MIB} MiB "
            "held: the cap is not enforced"
        )
    else:
        detail = (
            f"allocation failed at {in_use // MIB} MiB, below {MIN_FILL:.0%} "
            f"of the {limit_mb} MiB cap"
        )
    return {
        "device": device,
        "limit_mb": limit_mb,
        "allocated_mb": round(allocated / MIB),
        "next_allocation_failed": next_failed,
        "ok": ok,
        "detail": detail,
    }


def verify_gpus(tf: Any, limits_mb: dict[str, int | None]) -> list[dict[str, Any]]:
    """Fill each logical GPU up to its cap in MiB and check the next allocation fails.

    ``limits_mb`` maps logical device names (``"/device:GPU:0"``) to their cap;
    ``None`` means uncapped, reported as nothing to verify.
    """
    results = []
    for device, limit_mb in limits_mb.items():
        if limit_mb is None:
            results.append(
                {
                    "device": device,
                    "limit_mb": None,
                    "allocated_mb": 0,
                    "next_allocation_failed": False,
                    "ok": True,
                    "detail": "no cap to verify",
                }
            )
        else:
            results.append(_verify_one(tf, device, limit_mb))
    return results

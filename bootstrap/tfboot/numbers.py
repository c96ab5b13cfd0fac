"""Whole numbers from configuration text, bounded before they are converted.

``int()`` of a long digit string does quadratic work and, past Python's int-string limit
(4300 digits), raises ``ValueError``. No limit of tfboot needs more than 18 digits, so a
longer number is not converted: it reads as ``HUGE``, which every limit rejects.
"""

from __future__ import annotations

MAX_DIGITS = 18
HUGE = 10**MAX_DIGITS  # stands for any number of more than MAX_DIGITS digits


def digits(text: str) -> int | None:
    """``text`` (ASCII digits, blanks around them allowed) as an int, or None if not one."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()):
        return None
    significant = text.lstrip("0") or "0"
    return HUGE if len(significant) > MAX_DIGITS else int(significant)

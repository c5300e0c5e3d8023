"""What a slice id is, alone: every sliced kernel's start reads it (a slice's report files are
named by it), without the records and requests a ledger works with (issue 47: importing those
was 5 to 10 ms of each kernel start)."""

from __future__ import annotations

from typing import Any


def is_slice_id(text: Any) -> bool:
    """Whether ``text`` is a slice id as ledgers make them: 12 lowercase hex digits. An id names
    files (a slice's reports) and a cgroup, so a process never uses one that is not."""
    return isinstance(text, str) and len(text) == 12 and not text.strip("0123456789abcdef")

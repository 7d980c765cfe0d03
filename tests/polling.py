"""Waiting in tests for a condition another process makes true: polled until a
deadline far beyond what it takes on a loaded machine, never a sleep of a
guessed length."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")
GENEROUS_S = 30.0


def eventually(condition: Callable[[], T], what: str, timeout_s: float = GENEROUS_S,
               poll_s: float = 0.01) -> T:
    """``condition()``'s first true value; ``AssertionError`` naming ``what``
    if it is still false after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s")
        time.sleep(poll_s)
    return value

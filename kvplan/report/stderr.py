"""Warnings for people, on stderr, one line each: stdout stays the report or the one JSON document.

    warn(message)             `kvplan: warning: message`
    warn_once(messages)       each distinct message once, in the order they first came (None skipped)"""

from __future__ import annotations

import sys
from collections.abc import Iterable

PREFIX = "kvplan: warning: "


def warn(message: str) -> None:
    print(PREFIX + message, file=sys.stderr)


def warn_once(messages: Iterable[str | None]) -> None:
    for message in dict.fromkeys(message for message in messages if message):
        warn(message)

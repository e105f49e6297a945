"""Tiny factories for the engine tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kvplan.semantics.engine.request import Request

RequestFactory = Callable[..., Request]


@pytest.fixture
def make_request() -> RequestFactory:
    """`make_request("a", 40)` -> a request with prompt tokens 0..39 (or the given list) that will
    generate tokens 10**9, 10**9 + 1, ...; `start` shifts generated prompts apart."""

    def make(request_id: str, prompt: int | list[int], max_tokens: int = 100, start: int = 0,
             **extra) -> Request:
        tokens = list(range(start, start + prompt)) if isinstance(prompt, int) else prompt
        return Request(request_id, tokens, max_tokens, range(10**9, 10**9 + max_tokens), **extra)

    return make

"""Running torch's meta kernels and reference decompositions without importing its compiler.

Importing `torch._dynamo` costs about 2 s, a third of a fake profile, for a compiler kvplan never
runs. Many of torch's meta and reference kernels (`torch._refs.add`, the decompositions fake
tensors run) are wrapped by `torch._disable_dynamo`, which imports `torch._dynamo` on their first
call to turn the compiler off around them. The wrapper looks for the disabled function it cached
on that first call: handing it the plain function is what `disable` amounts to when nothing is
being compiled, which is always the case here.

What this misses (another torch version) still works, only slower."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

MAX_WRAPPER_DEPTH = 8


@functools.cache
def skip_dynamo_imports() -> int:
    """Mark every `_disable_dynamo`-wrapped decomposition and reference as already disabled.
    Returns how many were marked (once per process)."""
    import torch._decomp
    import torch._refs

    wrapper_code = torch._disable_dynamo(lambda: None).__code__
    marked = 0
    candidates: list[Any] = [*torch._decomp.decomposition_table.values(), *torch._decomp.meta_table.values()]
    candidates += [getattr(torch._refs, name) for name in dir(torch._refs)]
    for candidate in candidates:
        marked += _mark(candidate, wrapper_code)
    return marked


def _mark(function: Any, wrapper_code: Any) -> int:
    """Follow `__wrapped__` and the functions in closures (the reference wrappers nest a few deep)."""
    marked = 0
    todo, seen = [(function, 0)], set()
    while todo:
        function, depth = todo.pop()
        if not callable(function) or id(function) in seen or depth > MAX_WRAPPER_DEPTH:
            continue
        seen.add(id(function))
        code = getattr(function, "__code__", None)
        if code is wrapper_code:
            wrapped: Callable[..., Any] = function.__closure__[code.co_freevars.index("fn")].cell_contents
            if getattr(wrapped, "__dynamo_disable", None) is None:
                wrapped.__dynamo_disable = wrapped  # type: ignore[attr-defined]
                marked += 1
        inner = [getattr(function, "__wrapped__", None)]
        inner += [cell.cell_contents for cell in getattr(function, "__closure__", None) or () if _filled(cell)]
        todo += [(each, depth + 1) for each in inner if callable(each)]
    return marked


def _filled(cell: Any) -> bool:
    try:
        return cell.cell_contents is not None
    except ValueError:  # a closure variable not bound yet
        return False

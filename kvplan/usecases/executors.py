"""Executors: one function over many independent inputs, in this process, in a pool of processes on
this machine (one worker per core), or as Ray tasks on a cluster. `kvplan sweep` runs its cells and
`kvplan fit` its search through them.

    with make_executor("local") as executor:
        outcomes = executor.map(task, items, on_outcome=progress)

Every item gives one `Outcome`, in the order of the items: its value, or the one-line error of
the exception its task raised. A failing task never stops the others. The functions and items
cross process (and machine) boundaries, so they must be picklable: module-level functions of
kvplan and frozen dataclasses."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import multiprocessing
import os
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Literal, TypeVar

from kvplan.errors import KvplanError
from kvplan.hub import HubAccess, current_access, hub_access
from kvplan.parsing import FieldError
from kvplan.schema import Integer

T = TypeVar("T")
R = TypeVar("R")

ExecutorName = Literal["local", "ray"]
EXECUTORS: tuple[ExecutorName, ...] = ("local", "ray")
RAY_EXTRA = "pip install -e '.[ray]' in kvplan's clone"


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """What one task gave: `value`, or `error` (one line) when it raised. `crashed`: the task
    raised something other than kvplan's own refusal (a KvplanError), a fault of kvplan's, which
    callers must not report as the configuration's answer."""

    index: int
    value: R | None = None
    error: str | None = None
    crashed: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


OnOutcome = Callable[[Outcome[Any]], None]


def error_text(error: BaseException) -> str:
    """One line: kvplan's own message for a KvplanError, else the exception's type and message."""
    text = str(error) if isinstance(error, KvplanError) else f"{type(error).__name__}: {error}"
    return " ".join(text.split()) or type(error).__name__


def guarded(function: Callable[[T], R], index: int, item: T, access: HubAccess | None = None) -> Outcome[R]:
    """Run one task; an exception becomes the outcome's error. `access` is the hub access of the
    command that asked for the task (`--offline` reaches a worker process or a Ray node with it)."""
    try:
        with hub_access(access) if access is not None else contextlib.nullcontext():
            return Outcome(index, function(item))
    except Exception as error:  # a failing task is recorded, never the end of the run
        return Outcome(index, None, error_text(error), crashed=not isinstance(error, KvplanError))


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Executor:
    """The interface: `map` runs a function over items and returns their outcomes in item order,
    calling `on_outcome` in this process as each one arrives."""

    name: str = ""
    workers: int = 1

    def map(self, function: Callable[[T], R], items: Sequence[T],
            on_outcome: OnOutcome | None = None) -> list[Outcome[R]]:
        raise NotImplementedError

    def close(self) -> None:
        """Let go of the workers (and of the cluster connection this executor made)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


class InProcessExecutor(Executor):
    """One task after the other in this process (`--workers 1`)."""

    name = "local"
    workers = 1

    def map(self, function: Callable[[T], R], items: Sequence[T],
            on_outcome: OnOutcome | None = None) -> list[Outcome[R]]:
        outcomes = []
        for index, item in enumerate(items):
            outcome = guarded(function, index, item)
            if on_outcome is not None:
                on_outcome(outcome)
            outcomes.append(outcome)
        return outcomes


class LocalExecutor(Executor):
    """A pool of worker processes on this machine. The workers are forked from this process when
    the pool starts, before any progress display runs a thread, so they start in milliseconds with
    kvplan already imported (unless this process has imported torch); each keeps its own caches
    (the planner's profile runs) across tasks."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or cores()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def _start(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(max_workers=self.workers, mp_context=_context())
            # with fork the pool starts every worker at its first task
            self._pool.submit(int).result()
        return self._pool

    def __enter__(self) -> Executor:
        self._start()
        return self

    def map(self, function: Callable[[T], R], items: Sequence[T],
            on_outcome: OnOutcome | None = None) -> list[Outcome[R]]:
        results: dict[int, Outcome[R]] = {}

        def record(outcome: Outcome[R]) -> None:
            results[outcome.index] = outcome
            if on_outcome is not None:
                on_outcome(outcome)

        # A worker that dies (killed, out of memory) breaks the pool and fails every unfinished task
        # in it, not only its own: those run once more in a fresh pool, which a passing accident
        # does not break again. A task that breaks that pool too is found by running the rest one
        # at a time, each alone in a worker, so that only the task that kills its worker fails.
        broken = self._run_pooled(function, items, list(range(len(items))), record)
        if broken:
            broken = self._run_pooled(function, items, broken, record)
        for index in broken:
            record(self._run_alone(function, index, items[index]))
        return [results[index] for index in range(len(items))]

    def _run_pooled(self, function: Callable[[T], R], items: Sequence[T], todo: list[int],
                    record: Callable[[Outcome[R]], None]) -> list[int]:
        """Run `todo` in the pool; returns the tasks the pool broke under (the pool is gone then)."""
        pool = self._start()
        futures = {pool.submit(guarded, function, index, items[index], current_access()): index for index in todo}
        broken: list[int] = []
        for future in concurrent.futures.as_completed(futures):
            try:
                record(future.result())
            except BrokenProcessPool:
                broken.append(futures[future])
        if broken:
            self.close()
        return sorted(broken)

    def _run_alone(self, function: Callable[[T], R], index: int, item: T) -> Outcome[R]:
        """One task in a pool of its own worker: if the worker dies, the task is the cause."""
        pool = concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=_context())
        try:
            return pool.submit(guarded, function, index, item, current_access()).result()
        except BrokenProcessPool as error:
            return Outcome(index, None, f"the worker process died ({error_text(error)})")
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class RayExecutor(Executor):
    """The same tasks as Ray remote functions on an existing cluster (`address`: "auto", or the
    head's HOST:PORT). kvplan must be installed where the tasks run; Ray is imported only here."""

    name = "ray"

    def __init__(self, address: str = "auto", workers: int | None = None) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # kvplan reaches no network by itself
        try:
            import ray
        except ImportError:
            raise KvplanError(f"--executor ray needs Ray, which is not installed: run `{RAY_EXTRA}`") from None
        self._ray = ray
        self._owns_connection = not ray.is_initialized()
        if self._owns_connection:
            _check_reachable(address)
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, ValueError) as error:
                raise KvplanError(
                    f"--ray-address {address}: no Ray cluster to connect to ({error_text(error)}); start one with "
                    "`ray start --head` or give the head's HOST:PORT") from None
            _raylet_messages_to_stderr()
        cluster_cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = workers or max(1, cluster_cpus)
        self._remote: Any = ray.remote(num_cpus=1)(guarded)

    def map(self, function: Callable[[T], R], items: Sequence[T],
            on_outcome: OnOutcome | None = None) -> list[Outcome[R]]:
        ray = self._ray
        results: dict[int, Outcome[R]] = {}
        waiting = iter(range(len(items)))
        running: dict[Any, int] = {}

        def submit(count: int) -> None:
            for index in _take(waiting, count):
                running[self._remote.remote(function, index, items[index], current_access())] = index

        submit(self.workers)
        while running:
            done, _ = ray.wait(list(running), num_returns=1)
            for reference in done:
                index = running.pop(reference)
                try:
                    outcome = ray.get(reference)
                except Exception as error:  # the task's worker died, or the cluster went away
                    outcome = Outcome(index, None, f"Ray task failed ({error_text(error)})")
                results[index] = outcome
                if on_outcome is not None:
                    on_outcome(outcome)
            submit(len(done))
        return [results[index] for index in range(len(items))]

    def close(self) -> None:
        if self._owns_connection and self._ray.is_initialized():
            self._ray.shutdown()


def _raylet_messages_to_stderr() -> None:
    """Ray's driver prints the cluster's error messages (a task's worker killed for memory) on
    stdout, where `--json` output goes: send them to stderr with kvplan's own messages."""
    try:
        from ray._private import worker
    except ImportError:  # another Ray layout: its messages stay where Ray puts them
        return
    printer = getattr(worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "to_stderr", False):
        return

    def print_to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        printer({**data, "is_err": True}, ignore_prefix)

    print_to_stderr.to_stderr = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_to_stderr


def _context() -> multiprocessing.context.BaseContext:
    # a process that has run torch may hold OpenMP threads a forked child would wait on forever:
    # its workers come from a clean server process instead
    return multiprocessing.get_context("forkserver" if "torch" in sys.modules else "fork")


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Refuse at once a HOST:PORT where nothing listens: Ray itself retries for minutes."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise KvplanError(f"--ray-address {address}: nothing answers there ({error.strerror or error}); start a "
                          "cluster with `ray start --head`, or give its head's HOST:PORT") from None


def _take(iterator: Iterator[int], count: int) -> list[int]:
    return [index for _, index in zip(range(count), iterator, strict=False)]


# tasks at once, on any cluster; a local pool forks every worker at its first task, so it is held
# to a few per core (99,999,999 workers were as many processes: issue 12)
WORKERS = Integer(1, 10_000, "tasks at once")
LOCAL_WORKERS_PER_CORE = 8


def make_executor(name: str, workers: int | None = None, ray_address: str | None = None) -> Executor:
    """`local` (the default; one worker per core, or `workers`) or `ray` (at `ray_address`, "auto"
    by default)."""
    if workers is not None:
        try:
            WORKERS.check(workers, "--workers")
        except FieldError as error:
            raise KvplanError(str(error)) from None
    if name not in EXECUTORS:
        raise KvplanError(f"--executor takes {' or '.join(EXECUTORS)}, got {name!r}")
    if ray_address is not None and name != "ray":
        raise KvplanError("--ray-address applies only with --executor ray")
    if name == "ray":
        return RayExecutor(ray_address or "auto", workers)
    if workers is not None and workers > LOCAL_WORKERS_PER_CORE * cores():
        raise KvplanError(f"--workers {workers}: a local pool runs a process per worker, and more than "
                          f"{LOCAL_WORKERS_PER_CORE} per core ({LOCAL_WORKERS_PER_CORE * cores()} here) only "
                          "crowd the machine: give fewer, or --executor ray")
    count = workers or cores()
    return InProcessExecutor() if count == 1 else LocalExecutor(count)

"""The executors: outcomes in item order, a failing task recorded and never the end of the run,
a dying worker costing only its own task."""

from __future__ import annotations

import os

import pytest

from kvplan.errors import KvplanError
from kvplan.usecases.executors import InProcessExecutor, LocalExecutor, cores, error_text, make_executor


def square_or_fail(value: int) -> int:
    if value == 3:
        raise KvplanError("three is\nrefused")
    if value == 5:
        raise ZeroDivisionError("division by zero")
    return value * value


def die_on_four(value: int) -> int:
    if value == 4:
        os._exit(17)  # the worker process dies without a word, as under the OOM killer
    return value + 100


def check(outcomes, expected_values, expected_errors):
    assert [o.index for o in outcomes] == list(range(len(expected_values)))
    assert [o.value for o in outcomes] == expected_values
    assert [o.error for o in outcomes] == expected_errors


EXPECTED = ([0, 1, 4, None, 16, None, 36], [None, None, None, "three is refused", None,
                                               "ZeroDivisionError: division by zero", None])


def test_in_process_runs_every_item_in_order_and_records_failures():
    heard = []
    with InProcessExecutor() as executor:
        outcomes = executor.map(square_or_fail, list(range(7)), on_outcome=heard.append)
    check(outcomes, *EXPECTED)
    assert [o.index for o in heard] == list(range(7))


def test_the_process_pool_gives_the_same_outcomes():
    heard = []
    with LocalExecutor(2) as executor:
        outcomes = executor.map(square_or_fail, list(range(7)), on_outcome=heard.append)
        # the pool is kept between maps
        again = executor.map(square_or_fail, [6, 2])
    check(outcomes, *EXPECTED)
    assert sorted(o.index for o in heard) == list(range(7))
    assert [o.value for o in again] == [36, 4]


@pytest.mark.parametrize("workers", [2, 3])
def test_a_worker_that_dies_fails_its_task_only(workers):
    heard = []
    with LocalExecutor(workers) as executor:
        outcomes = executor.map(die_on_four, list(range(12)), on_outcome=heard.append)
        # the executor goes on with a fresh pool
        again = executor.map(die_on_four, [1, 2])
    assert [o.value for o in outcomes] == [100, 101, 102, 103, None, *range(105, 112)]
    assert "worker process died" in outcomes[4].error
    assert sorted(o.index for o in heard) == list(range(12))  # every outcome heard once
    assert [o.value for o in again] == [101, 102]


def test_make_executor_checks_its_options():
    assert isinstance(make_executor("local", 1), InProcessExecutor)
    local = make_executor("local")
    assert local.workers == cores()
    local.close()
    with pytest.raises(KvplanError, match="--executor takes local or ray"):
        make_executor("dask")
    with pytest.raises(KvplanError, match="--workers: 0 is out of range"):
        make_executor("local", 0)
    # issue 12: a local pool forks every worker at once; 99,999,999 of them are refused before a fork
    with pytest.raises(KvplanError, match="--workers: 99999999 is out of range"):
        make_executor("local", 99_999_999)
    with pytest.raises(KvplanError, match=r"--workers 9000: .* more than 8 per core"):
        make_executor("local", 9000)
    with pytest.raises(KvplanError, match="--ray-address applies only with --executor ray"):
        make_executor("local", None, "auto")


def test_error_text_is_one_line():
    assert error_text(KvplanError("a\n  b")) == "a b"
    assert error_text(ValueError()) == "ValueError:"


def fake_ray(monkeypatch):
    """A stand-in for Ray's driver API: just enough to connect, and its stdout/stderr printer."""
    import sys
    import types

    ray = types.ModuleType("ray")
    private = types.ModuleType("ray._private")
    worker = types.ModuleType("ray._private.worker")

    def print_to_stdstream(data, ignore_prefix):
        print(*data["lines"], file=sys.stderr if data["is_err"] else sys.stdout)

    worker.print_to_stdstream = print_to_stdstream
    state = {"up": False}
    ray.is_initialized = lambda: state["up"]
    ray.init = lambda **kwargs: state.update(up=True)
    ray.shutdown = lambda: state.update(up=False)
    ray.cluster_resources = lambda: {"CPU": 3}
    ray.remote = lambda **kwargs: (lambda function: function)
    ray._private, private.worker = private, worker
    for name, module in (("ray", ray), ("ray._private", private), ("ray._private.worker", worker)):
        monkeypatch.setitem(sys.modules, name, module)
    return worker


def test_the_clusters_error_messages_go_to_stderr(monkeypatch, capsys):
    worker = fake_ray(monkeypatch)
    with make_executor("ray") as executor:
        assert executor.workers == 3
        # what Ray's error listener thread does when the cluster kills a task's worker
        worker.print_to_stdstream({"lines": ["(raylet) Task failed due to oom"], "pid": "raylet",
                                   "is_err": False}, ignore_prefix=False)
    out, err = capsys.readouterr()
    assert out == ""
    assert "failed due to oom" in err

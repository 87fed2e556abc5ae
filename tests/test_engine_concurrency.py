"""Several backward passes at once: threads that each call backward, and a graph whose nodes run
on more than one thread (CPU and CUDA). Every wait here has a timeout, so a deadlock fails the test
instead of hanging it."""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

from backstep.engine.capture import Capture
from backstep.engine.controller import BackstepAbort, Controller
from backstep.engine.recorder import ListRecorder
from tests.engine_fixtures import captured, check_stream

TIMEOUT = 20.0  # seconds; only ever reached by a deadlock
THREADS = 3
ROUNDS = 2  # backward passes per thread


def mlp_loss(seed: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """An 8x8 tanh MLP's loss and its two weights, from a seed."""
    g = torch.Generator().manual_seed(seed)
    w1 = torch.randn(8, 8, generator=g, requires_grad=True)
    w2 = torch.randn(8, 8, generator=g, requires_grad=True)
    x = torch.randn(4, 8, generator=g)
    return torch.tanh(torch.tanh(x @ w1) @ w2).sum(), [w1, w2]


def work(seed: int, grads: dict[int, list[torch.Tensor]], errors: list[BaseException]) -> None:
    try:
        params: list[torch.Tensor] = []
        for r in range(ROUNDS):
            loss, params = mlp_loss(seed) if r == 0 else (_again(params), params)
            loss.backward()
        grads[seed] = [p.grad.clone() for p in params]
    except BaseException as exc:  # noqa: BLE001 - the test thread reports it
        errors.append(exc)


def _again(params: list[torch.Tensor]) -> torch.Tensor:
    w1, w2 = params
    x = torch.ones(4, 8)
    return torch.tanh(torch.tanh(x @ w1) @ w2).sum()


def run_threads(target: Callable[..., None], seeds: list[int]) -> tuple[dict, list, list]:
    grads: dict[int, list[torch.Tensor]] = {}
    errors: list[BaseException] = []
    threads = [threading.Thread(target=target, args=(s, grads, errors), name=f"worker-{s}",
                                daemon=True) for s in seeds]
    for t in threads:
        t.start()
    return grads, errors, threads


def plain_grads(seeds: list[int]) -> dict[int, list[torch.Tensor]]:
    grads: dict[int, list[torch.Tensor]] = {}
    errors: list[BaseException] = []
    for s in seeds:
        work(s, grads, errors)
    assert not errors
    return grads


class Driver:
    """Plays the UI: collects events and answers the shown stop from the test's thread."""

    def __init__(self, **options: Any) -> None:
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stops: queue.Queue[dict[str, Any]] = queue.Queue()
        self.controller = Controller(self.emit, **options)

    def emit(self, event: dict[str, Any]) -> None:
        with self.lock:
            self.events.append(event)
        if event["event"] == "stopped":
            self.stops.put(event)

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if e["event"] == kind]


def drive(driver: Driver, threads: list[threading.Thread], choose: Callable[[dict], dict]) -> int:
    """Answer stops until every thread is done; returns how many stops were answered."""
    answered = idle = 0
    while any(t.is_alive() for t in threads):
        try:
            stop = driver.stops.get(timeout=0.05)
        except queue.Empty:
            idle += 1
            assert idle < TIMEOUT / 0.05, "threads alive but no stop shown: a deadlock"
            continue
        idle = 0
        driver.controller.feed(choose(stop))
        answered += 1
        assert answered < 10_000
    for t in threads:
        t.join(TIMEOUT)
        assert not t.is_alive(), "a backward thread never finished"
    return answered


def assert_same(grads: dict, plain: dict) -> None:
    assert grads.keys() == plain.keys()
    for seed, expected in plain.items():
        assert all(torch.equal(a, b) for a, b in zip(grads[seed], expected, strict=True))


@pytest.mark.parametrize("seed", range(8))
def test_random_commands_on_two_and_three_threads_never_deadlock(seed: int) -> None:
    rng = random.Random(seed)
    seeds = [10 + k for k in range(2 + seed % 2)]
    plain = plain_grads(seeds)
    breakpoints = [{"kind": "node", "pattern": "TanhBackward*"}] if seed % 3 == 0 else []
    driver = Driver(breakpoints=breakpoints)
    rec = ListRecorder()
    capture = Capture(rec, driver.controller, record=seed % 2 == 0)
    previous: list[int] = []

    def choose(stop: dict[str, Any]) -> dict[str, Any]:
        if not previous:  # every thread reaches its first stop: the others wait in line
            _wait_for(lambda: len(driver.controller.waiting()) == len(seeds) - 1)
        elif rng.random() < 0.2:
            # a late command, meant for a stop that already resumed: refused, changes nothing
            driver.controller.feed({"cmd": "step", "stop": rng.choice(previous)})
        previous.append(stop["stop"])
        command = rng.choices(["step", "continue", "finish"], weights=[6, 2, 1])[0]
        return {"cmd": command, "stop": stop["stop"]}

    with captured(capture):
        grads, errors, threads = run_threads(work, seeds)
        answered = drive(driver, threads, choose)
    assert not errors
    assert_same(grads, plain)
    assert answered >= len(seeds)  # every pass stopped at its start at least
    stopped = driver.of("stopped")
    assert len({s["stop"] for s in stopped}) == len(stopped)  # each stop shown once
    assert {s["thread"] for s in stopped} <= {f"worker-{s}" for s in seeds}
    assert all(s["device"] == "cpu" for s in stopped)
    for late in [e for e in driver.of("error")]:
        assert "no longer paused" in late["message"]
    assert not driver.controller.waiting()
    lines = [len(e["stops"]) for e in driver.of("waiting")]
    assert max(lines) == len(seeds) - 1 and lines[-1] == 0
    check_stream(rec.events)
    assert len(rec.of("pass_begin")) == len(seeds) * ROUNDS
    if not capture.record:
        return
    # a trace of interleaved passes: each pass_begin before its nodes, pass_end after them
    order = {id(e): k for k, e in enumerate(rec.events)}
    for begin in rec.of("pass_begin"):
        number = begin["pass"]
        (end,) = [e for e in rec.of("pass_end") if e["pass"] == number]
        nodes = [e for e in rec.of("node") if e["pass"] == number]
        assert [n["step"] for n in nodes] == list(range(1, len(nodes) + 1))
        assert all(order[id(begin)] < order[id(n)] < order[id(end)] for n in nodes)


def test_a_second_pass_waits_in_line_and_is_shown_when_the_first_resumes() -> None:
    driver = Driver()
    seeds = [1, 2]
    plain = plain_grads(seeds)
    with captured(Capture(None, driver.controller, record=False)):
        grads, errors, threads = run_threads(work, seeds)
        first = driver.stops.get(timeout=TIMEOUT)
        # the other thread reaches its first node and waits behind the shown stop
        waiting = _wait_for(lambda: driver.controller.waiting())
        assert [w.pass_ for w in waiting] != [first["pass"]]
        (line,) = [e for e in driver.of("waiting") if e["stops"]][:1]
        (behind,) = line["stops"]
        assert behind["thread"] != first["thread"] and behind["stop"] != first["stop"]
        assert driver.stops.empty()  # only one stop is shown at a time
        driver.controller.feed({"cmd": "step", "stop": behind["stop"]})  # not shown yet
        assert "waiting in line" in driver.of("error")[-1]["message"]
        assert driver.stops.empty() and driver.controller.waiting()
        driver.controller.feed({"cmd": "continue", "stop": first["stop"]})
        second = driver.stops.get(timeout=TIMEOUT)
        assert second["stop"] == behind["stop"] and second["pass"] == behind["pass"]
        # the first stop is gone: a command naming it is refused and resumes nothing
        driver.controller.feed({"cmd": "step", "stop": first["stop"]})
        assert driver.of("error")[-1]["message"] == f"stop {first['stop']} is no longer paused"
        assert driver.controller.paused is not None
        driver.controller.feed({"cmd": "continue", "stop": second["stop"]})
        drive(driver, threads, lambda stop: {"cmd": "continue", "stop": stop["stop"]})
    assert not errors
    assert_same(grads, plain)


def test_close_releases_every_waiting_thread() -> None:
    driver = Driver()
    seeds = [3, 4, 5]
    plain = plain_grads(seeds)
    with captured(Capture(None, driver.controller, record=False)):
        grads, errors, threads = run_threads(work, seeds)
        driver.stops.get(timeout=TIMEOUT)
        _wait_for(lambda: len(driver.controller.waiting()) == 2)
        driver.controller.close()  # the UI went away: nobody may stay blocked
        for t in threads:
            t.join(TIMEOUT)
            assert not t.is_alive()
    assert not errors
    assert_same(grads, plain)
    assert driver.controller.paused is None


def test_abort_ends_only_the_shown_pass() -> None:
    driver = Driver()
    seeds = [6, 7]
    plain = plain_grads(seeds)
    with captured(Capture(None, driver.controller, record=False)):
        grads, errors, threads = run_threads(work, seeds)
        first = driver.stops.get(timeout=TIMEOUT)
        _wait_for(lambda: driver.controller.waiting())
        driver.controller.feed({"cmd": "abort", "stop": first["stop"]})
        drive(driver, threads, lambda stop: {"cmd": "step", "stop": stop["stop"]})
    assert len(errors) == 1 and isinstance(errors[0], BackstepAbort)
    survivor = [s for s in seeds if s in grads]
    assert len(survivor) == 1
    assert_same(grads, {survivor[0]: plain[survivor[0]]})


def _wait_for(condition: Callable[[], Any]) -> Any:
    done = threading.Event()
    for _ in range(int(TIMEOUT / 0.01)):
        value = condition()
        if value:
            return value
        done.wait(0.01)
    raise AssertionError("condition never became true")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cpu_cuda_cpu_graph_steps_across_the_device_thread() -> None:
    def build() -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        w = torch.randn(8, 8, generator=g, requires_grad=True)
        h = torch.tanh(torch.ones(4, 8) @ w)  # CPU
        h = torch.tanh(h.cuda() @ w.cuda()).sum(dim=0)  # CUDA
        return (h.cpu() * 2).sum(), w  # CPU again

    loss, w = build()
    loss.backward()
    plain = w.grad.clone()
    driver = Driver()
    rec = ListRecorder()
    with captured(Capture(rec, driver.controller, record=True)):
        grads: dict[str, torch.Tensor] = {}
        errors: list[BaseException] = []

        def run(*_: Any) -> None:
            try:
                loss, w = build()
                loss.backward()
                grads["w"] = w.grad
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        drive(driver, [thread], lambda stop: {"cmd": "step", "stop": stop["stop"]})
    assert not errors
    assert torch.equal(grads["w"], plain)
    stopped = driver.of("stopped")
    assert {s["device"] for s in stopped} >= {"cpu", "cuda:0"}
    assert len({s["thread"] for s in stopped}) >= 2  # the caller's thread and the device thread
    (begin,) = rec.of("pass_begin")
    assert len(stopped) == len(begin["nodes"])  # stepping stops once before every node
    check_stream(rec.events)  # node events: steps 1..N although two threads ran them
    # nodes on the device thread say so; the others ran on the thread pass_begin names
    threads = {e.get("thread") for e in rec.of("node") if e["step"] is not None}
    assert None in threads and len(threads) >= 2
    assert begin["thread"] not in threads


def test_node_events_name_their_thread_only_when_it_is_not_the_pass_s(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On CPU every node runs on the caller's thread: node events carry no ``thread``. A node
    seen from another thread (a device thread: simulated here) names it."""
    from backstep.engine.capture import hooks

    loss, _ = mlp_loss(0)
    rec = ListRecorder()
    with captured(Capture(rec)):
        loss.backward()
    (begin,) = rec.of("pass_begin")
    assert begin["thread"] == threading.current_thread().name
    assert rec.of("node") and all("thread" not in e for e in rec.of("node"))

    real = threading.get_ident()
    monkeypatch.setattr(hooks, "get_ident", lambda: real + 1)  # every node looks "elsewhere"
    loss, _ = mlp_loss(1)
    rec = ListRecorder()
    with captured(Capture(rec)):
        loss.backward()
    nodes = rec.of("node")
    assert nodes and all(e["thread"] == threading.current_thread().name for e in nodes)
    check_stream(rec.events)

"""Forward provenance overhead vs plain PyTorch and anomaly mode, measured in one run.

    python benchmarks/bench_provenance.py [--reps 15] [--threads 1] [--quick]

For each workload (benchmarks/workloads.py) the variants run interleaved, rotating their order
every repetition; the table shows medians and ratios to plain. Target: forward with provenance
<= 1.10x plain.

Provenance runs on two mechanisms: a wrapper around every nn.Module call (provenance_calls: on
every thread) and a torch-function mode (every torch call made outside torch's own modules;
inside them the mode is paused and the wrapper logs each module call instead). The "floor" row is
the wrapper with no work in it: provenance cannot beat it on any workload. "no-op global module
hooks" is what torch's own global hooks would cost for the same job (they send every call down
``_call_impl``'s slow path). "empty mode + no-op wrapper" is what a mode left on for every op would
cost at least: on the worst case (a stack of torch's own modules, no user code inside) provenance
sits between the floor and it.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.nn.modules import module as module_mod
from torch.overrides import TorchFunctionMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import gpt_realistic, transformer_worst_case  # noqa: E402

from backstep.engine.provenance import Provenance  # noqa: E402
from backstep.engine.provenance import calls as provenance_calls  # noqa: E402


@contextlib.contextmanager
def _plain() -> Iterator[None]:
    yield


@contextlib.contextmanager
def _provenance(saved_versions: bool) -> Iterator[None]:
    with Provenance(saved_versions=saved_versions):
        yield


class _EmptyMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _hooks() -> Iterator[None]:
    """No-op global module pre/post hooks (the post-hook with ``always_call``, as provenance's)."""
    handles = [
        module_mod.register_module_forward_pre_hook(lambda m, a: None),
        module_mod.register_module_forward_hook(lambda m, a, o: None, always_call=True),
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _enter(module: torch.nn.Module, args: tuple[object, ...]) -> None:
    pass


def _leave(module: torch.nn.Module, output: object) -> None:
    pass


@contextlib.contextmanager
def _wrapper() -> Iterator[None]:
    """provenance_calls' wrapper around every module call, with nothing to do."""
    provenance_calls.add(_enter, _leave)
    try:
        yield
    finally:
        provenance_calls.remove(_enter, _leave)


@contextlib.contextmanager
def _mode_and_wrapper() -> Iterator[None]:
    """An empty torch-function mode on top of the no-op wrapper."""
    with _wrapper(), _EmptyMode():
        yield


@contextlib.contextmanager
def _anomaly() -> Iterator[None]:
    with torch.autograd.set_detect_anomaly(True):
        yield


VARIANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "plain": _plain,
    "provenance": lambda: _provenance(True),
    "provenance, no saved versions": lambda: _provenance(False),
    "floor: no-op call wrapper": _wrapper,
    "no-op global module hooks": _hooks,
    "empty mode + no-op wrapper": _mode_and_wrapper,
    "anomaly mode": _anomaly,
}


def _step(model: torch.nn.Module, make_loss: Callable[[], torch.Tensor]) -> tuple[float, float]:
    """One timed forward and backward (seconds)."""
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    loss = make_loss()
    middle = time.perf_counter()
    loss.backward()
    end = time.perf_counter()
    return middle - start, end - middle


def bench(
    name: str, model: torch.nn.Module, make_loss: Callable[[], torch.Tensor], reps: int
) -> None:
    names = list(VARIANTS)
    forward: dict[str, list[float]] = {n: [] for n in names}
    total: dict[str, list[float]] = {n: [] for n in names}
    for n in names:  # warm-up, once each
        with VARIANTS[n]():
            _step(model, make_loss)
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for n in order:
            with VARIANTS[n]():
                fwd, bwd = _step(model, make_loss)
            forward[n].append(fwd)
            total[n].append(fwd + bwd)
    base_f = statistics.median(forward["plain"])
    base_t = statistics.median(total["plain"])
    print(f"\n{name}  ({reps} interleaved repetitions, medians)")
    print(f"  {'variant':<31}{'forward ms':>11}{'ratio':>8}{'fwd+bwd ms':>12}{'ratio':>8}")
    for n in names:
        f = statistics.median(forward[n])
        t = statistics.median(total[n])
        print(f"  {n:<31}{f * 1e3:>11.2f}{f / base_f:>7.2f}x{t * 1e3:>12.2f}{t / base_t:>7.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--quick", action="store_true", help="3 reps, 4 + 2 layers (smoke test)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    reps = 3 if args.quick else args.reps
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    depth = 4 if args.quick else 32
    bench(
        f"worst case: nn.TransformerEncoder, {depth} layers, d64",
        *transformer_worst_case(depth),
        reps,
    )
    depth = 2 if args.quick else 6
    bench(f"realistic: GPT decoder, {depth} layers, d256, seq 128", *gpt_realistic(depth), reps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

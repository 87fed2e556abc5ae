"""detach vs no_grad: where the graph is cut, why the encoder's bias gets no gradient, and what
each really does to memory (no_grad still allocates; detach shares storage and version counter).

Run it with `python detach_no_grad.py`, or step through it with `backstep demo detach_no_grad`.
"""

import json

import torch
import torch.nn as nn


def check(fact: str, ok: bool) -> None:
    """Print a fact this demo relies on; stop loudly if PyTorch disagrees."""
    if not ok:
        raise SystemExit(f"FACT FAILED: {fact}")
    print(f"  checked: {fact}")


def measure(name: str, value: object) -> object:
    """Print a value the narration quotes, so it is the run's number and never a typed-in one."""
    print(f"  measured: {name} = {json.dumps(value)}")
    return value


torch.manual_seed(0)
encoder = nn.Linear(10, 5)
decoder = nn.Linear(5, 10)
x = torch.randn(4, 10)

print("A. detach(): the decoder sees the values, the encoder gets no gradient")
encoded = encoder(x)
encoded_detached = encoded.detach()
reconstructed = decoder(encoded_detached)
loss = ((reconstructed - x) ** 2).mean()
addmm = reconstructed.grad_fn
print(
    f"  decoder's {type(addmm).__name__}.next_functions: "
    f"{[type(f).__name__ if f else None for f, _ in addmm.next_functions]}"
)
check(
    "the decoder's input slot in next_functions is None: the graph is cut there",
    addmm.next_functions[1][0] is None,
)
check(
    "detach() shares storage with the original (no copy)",
    encoded_detached.data_ptr() == encoded.data_ptr(),
)
loss.backward()  # pass 1: only decoder nodes
print(f"  decoder bias grad: {decoder.bias.grad is not None}")
print(f"  encoder bias grad: {encoder.bias.grad}")
check(
    "decoder.bias.grad is set, encoder.bias.grad is None",
    decoder.bias.grad is not None and encoder.bias.grad is None,
)

print("B. the same without detach(): the gradient reaches the encoder")
decoder.zero_grad()
reconstructed_2 = decoder(encoder(x))
check(
    "the second forward built a NEW decoder node: a different object from pass 1's",
    reconstructed_2.grad_fn is not addmm and type(reconstructed_2.grad_fn) is type(addmm),
)
loss = ((reconstructed_2 - x) ** 2).mean()
loss.backward()  # pass 2: decoder and encoder nodes
check("encoder.bias.grad is set once nothing cuts the graph", encoder.bias.grad is not None)

print("C. torch.no_grad(): no graph is recorded at all inside the block")
with torch.no_grad():
    out = encoder(x)
print(f"  out.requires_grad: {out.requires_grad}, out.grad_fn: {out.grad_fn}")
check(
    "under no_grad the output has requires_grad False and no grad_fn",
    not out.requires_grad and out.grad_fn is None,
)
try:
    out.sum().backward()  # pass 3: fails before any node runs
    error = None
except RuntimeError as exc:
    error = str(exc)
    print(f"  RuntimeError: {error}")
check(
    "backward on a no_grad result fails before any node runs",
    error is not None and "does not require grad" in error,
)
out_live = encoder(x)
out_detached = out_live.detach()
check(
    "detach() leaves the original live: out_live.requires_grad True, detached False",
    out_live.requires_grad and not out_detached.requires_grad,
)

print("D. the article's memory row: detach() 'Creates new tensor view', no_grad() 'No allocation'")
with torch.no_grad():
    out = encoder(x)
inputs = {x.data_ptr(), encoder.weight.data_ptr(), encoder.bias.data_ptr()}
measure("no_grad_out_bytes", out.untyped_storage().nbytes())
check(
    "no_grad still allocates its output: out has its own storage of 4 * 5 floats",
    out.untyped_storage().nbytes() == 4 * 5 * 4 and out.data_ptr() not in inputs,
)
live = encoder(x)
detached = live.detach()
check(
    "detach() allocates no data: the detached tensor uses the same storage",
    detached.untyped_storage().data_ptr() == live.untyped_storage().data_ptr(),
)
measure("detach_is_view", detached._is_view())
check(
    "detach() makes a new tensor object that is NOT a view: _is_view() is False",
    detached is not live and not detached._is_view(),
)
version = live._version
detached.zero_()  # in place, on the detached tensor
measure("version_before", version)
measure("version_after", live._version)
check(
    "detach() shares the version counter: detached.zero_() bumped live._version, and zeroed live",
    live._version == version + 1 and live.abs().sum().item() == 0.0,
)

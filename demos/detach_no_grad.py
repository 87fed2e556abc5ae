"""detach vs no_grad: where the graph is cut, and why the encoder's bias gets no gradient.

Run it with `python detach_no_grad.py`, or step through it with `backstep demo detach_no_grad`.
"""

import torch
import torch.nn as nn


def check(fact: str, ok: bool) -> None:
    """Print a fact this demo relies on; stop loudly if PyTorch disagrees."""
    if not ok:
        raise SystemExit(f"FACT FAILED: {fact}")
    print(f"  checked: {fact}")


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
loss = ((decoder(encoder(x)) - x) ** 2).mean()
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
    "backward on a no_grad result fails before any pass starts",
    error is not None and "does not require grad" in error,
)
out_live = encoder(x)
out_detached = out_live.detach()
check(
    "detach() leaves the original live: out_live.requires_grad True, detached False",
    out_live.requires_grad and not out_detached.requires_grad,
)

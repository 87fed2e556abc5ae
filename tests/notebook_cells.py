"""The cells the notebook tests run (a model with its reference gradients, an attached
backward, the check that they agree) and how they wait for a served UI's end."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

SETUP = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
x = torch.randn(16, 4)
def loss_fn():
    return (model(x) ** 2).mean()
loss_fn().backward()
reference = [p.grad.clone() for p in model.parameters()]
model.zero_grad(set_to_none=True)
"""

ATTACHED = """import backstep
backstep.attach()
print("hello from the cell")
loss = loss_fn()
loss.backward()
print("after backward")"""

SAME = "print(all(torch.equal(p.grad, r) for p, r in zip(model.parameters(), reference)))"


def gone(url: str, timeout: float) -> bool:
    """Whether the server at ``url`` stops answering within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=5).close()
        except OSError as exc:
            if not isinstance(exc, urllib.error.HTTPError):
                return True
        time.sleep(0.25)
    return False

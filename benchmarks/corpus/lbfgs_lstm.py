"""Large passes from an LBFGS closure: pytorch/examples' time-sequence prediction, smaller.

Two LSTMCells unrolled over a sine wave; LBFGS re-evaluates the closure up to 20 times a step,
and each evaluation's backward walks a graph of thousands of nodes.
"""

import sys

import torch
from torch import nn


class Sequence(nn.Module):
    def __init__(self, hidden: int = 51) -> None:
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        outputs = []
        h_t = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        c_t = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            outputs.append(self.linear(h_t2))
        return torch.cat(outputs, dim=1)


steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2
torch.manual_seed(0)
T, L, N = 20, 200, 20
x = torch.arange(L, dtype=torch.double).unsqueeze(0) + torch.randint(-4 * T, 4 * T, (N, 1))
data = torch.sin(x / T)
input, target = data[3:, :-1], data[3:, 1:]
seq = Sequence().double()
criterion = nn.MSELoss()
optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8)
for _ in range(steps):

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        out = seq(input)
        loss = criterion(out, target)
        print("loss:", loss.item())
        loss.backward()
        return loss

    optimizer.step(closure)
print(sum(p.double().sum().item() for p in seq.parameters()))

"""The big-pass workload of ``bench_bigpass.py``: PyTorch's time-sequence-prediction example
(LBFGS over two unrolled LSTMCells and a Linear, double precision), torch only, data from
``torch.sin``. With L=199 each backward pass has 6,380 nodes. It prints ``BENCH`` lines: when the
first backward starts (seconds after BENCH_T0, the benchmark's launch time) and when each
backward starts and how long it took."""
import os
import time

T0 = float(os.environ.get("BENCH_T0", time.time()))  # before torch's import: it is timed too

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

torch.set_num_threads(int(os.environ.get("BENCH_THREADS", 1)))  # steadier on a shared machine

N, L = int(os.environ.get("BENCH_N", 97)), int(os.environ.get("BENCH_L", 199))
PASSES = int(os.environ.get("BENCH_PASSES", 4))


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            outputs.append(self.linear(h_t2))
        return torch.cat(outputs, dim=1)


torch.manual_seed(0)
x = torch.arange(L + 1, dtype=torch.double).expand(N, L + 1) + \
    torch.randint(-80, 80, (N, 1)).double()
data = torch.sin(x / 20.0)
input, target = data[:, :-1], data[:, 1:]
seq = Sequence().double()
criterion = nn.MSELoss()
optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=PASSES)
count = [0]


def closure():
    optimizer.zero_grad()
    out = seq(input)
    loss = criterion(out, target)
    count[0] += 1
    print(f"BENCH start {count[0]} {time.time() - T0:.3f}", flush=True)
    t = time.perf_counter()
    loss.backward()
    print(f"BENCH backward {count[0]} {time.perf_counter() - t:.3f}", flush=True)
    return loss


t = time.perf_counter()
optimizer.step(closure)
print(f"BENCH total {time.perf_counter() - t:.3f} passes {count[0]}", flush=True)
print("grad", float(seq.linear.weight.grad.norm()), flush=True)

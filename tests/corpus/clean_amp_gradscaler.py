"""Clean: automatic mixed precision as the AMP recipe writes it (autocast around the forward,
GradScaler scaling the loss, unscale_ before clipping), on the CPU with bfloat16."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
x, y = torch.randn(20, 16), torch.randint(4, (20,))
for _ in range(3):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        output = model(x)
        loss = nn.functional.cross_entropy(output, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(optimizer)
    scaler.update()
print(scaler.get_scale() > 0)

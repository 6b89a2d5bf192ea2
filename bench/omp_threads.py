"""Two processes at once, as two pytest-xdist workers on a 2-core machine, each training a small
conv net (150 Adam steps on 8 x 4 x 16 x 16 inputs, like the tiny DAGs' models) with 1 and then
with 2 torch threads: wall and CPU seconds of each process. Why tests/conftest.py sets
``OMP_NUM_THREADS=1`` on the workers.

    .venv/bin/python bench/omp_threads.py            # both settings, two processes each
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time


def train(threads: int) -> None:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(4, 32, 3, padding=1),
        torch.nn.SiLU(),
        torch.nn.Conv2d(32, 32, 3, padding=1),
        torch.nn.SiLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 16 * 16, 64),
        torch.nn.Linear(64, 1),
    )
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 4, 16, 16)
    started = time.time()
    for _ in range(150):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"threads={threads} wall={time.time() - started:.1f}s cpu={usage.ru_utime + usage.ru_stime:.1f}s", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        train(int(sys.argv[1]))
    else:
        for threads in (1, 2):
            with open("/proc/loadavg") as f:
                print(f"load average before: {f.read().split()[0]}")
            procs = [subprocess.Popen([sys.executable, __file__, str(threads)]) for _ in range(2)]
            for p in procs:
                p.wait()

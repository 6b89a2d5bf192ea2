"""Each Snakemake job's wall time and peak GPU memory, from its log and an nvidia-smi record.

Usage: python bench/gpu_peaks.py <snakemake log> <gpu.csv>
``gpu.csv``: ``nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 2``
(as ``bench/device_full_dag.sh`` writes it). A job's interval runs from the timestamp line
before its ``rule``/``checkpoint`` block to the one before its ``Finished jobid`` line
(Snakemake stamps to the second); its peak is the largest sample of the device's memory in
use (``memory.used``: every process's, allocator caches included) taken more than
:data:`SETTLE_S` after its start, when the job before it has let go of the GPU (so a job of
less than that shows 0, and a peak shorter than the sampling period can be missed).
"""

import csv
import datetime as dt
import re
import sys

SETTLE_S = 2  # the sampling period of device_full_dag.sh's nvidia-smi


def samples(path: str) -> list[tuple[dt.datetime, int]]:
    out = []
    for row in csv.reader(open(path)):
        try:
            out.append((dt.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f"), int(row[1].split()[0])))
        except (ValueError, IndexError):  # the header, or a line nvidia-smi could not fill
            pass
    return out


def jobs(path: str) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """(rule, start, end) of each finished job, in start order."""
    found, now, pending = {}, None, None
    for line in open(path):
        if m := re.match(r"\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]", line):
            now = dt.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        elif m := re.match(r"(?:local)?(?:rule|checkpoint) (\S+):", line):
            pending = (m.group(1), now)
        elif (m := re.match(r"\s+jobid: (\d+)", line)) and pending:
            found[m.group(1)], pending = [*pending, None], None
        elif (m := re.match(r"Finished jobid: (\d+)", line)) and m.group(1) in found:
            found[m.group(1)][2] = now
    return sorted((tuple(j) for j in found.values() if j[2] is not None), key=lambda j: j[1])


def main(log: str, gpu: str) -> None:
    record = samples(gpu)
    print("| rule | wall (s) | GPU peak (GiB) |\n|---|---|---|")
    for rule, start, end in jobs(log):
        settled = start + dt.timedelta(seconds=SETTLE_S)
        peak = max((mib for t, mib in record if settled < t <= end), default=0)
        print(f"| {rule} | {(end - start).total_seconds():.0f} | {peak / 1024:.1f} |")


if __name__ == "__main__":
    main(*sys.argv[1:3])

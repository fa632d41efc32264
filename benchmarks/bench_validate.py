"""Cost of `moesim validate`, row by row: `python benchmarks/bench_validate.py [FILE.csv]
[--jobs N] [--slowest K]`.

Runs every row of the file that validate simulates (the first of each group of rows moesim
simulates alike; the others share its simulation) one after another in this process and prints
the total, the K slowest rows with their wall times, and how long N workers take when handed the
rows in the file's order (as `validate --jobs N` does: each row to the first worker free, from the
measured times) against the work shared evenly. The default file is
../shared/data/calibration.csv (about 15 minutes of one core).
"""

from __future__ import annotations

import argparse
import heapq
import time
from pathlib import Path

from simulator.validation import (built_scenarios, first_alike, read_measurements,
                                  validate_row)

DEFAULT_FILE = Path(__file__).resolve().parents[2] / "shared" / "data" / "calibration.csv"


def makespan_s(durations_s: list[float], workers: int) -> float:
    """When the last of `durations_s`, handed out in order to the first free worker, ends."""
    free_at = [0.0] * workers
    for duration in durations_s:
        heapq.heappush(free_at, heapq.heappop(free_at) + duration)
    return max(free_at)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("file", nargs="?", default=str(DEFAULT_FILE))
    options.add_argument("--jobs", type=int, default=2)
    options.add_argument("--slowest", type=int, default=10)
    args = options.parse_args()
    for name in ("jobs", "slowest"):
        if getattr(args, name) < 1:
            options.error(f"--{name}={getattr(args, name)}: must be >= 1")
    try:
        rows = read_measurements(args.file)
    except ValueError as error:
        options.error(str(error))
    timed: list[tuple[float, str]] = []
    first = first_alike(built_scenarios(rows))
    simulated = [row for index, row in zip(first, rows) if row is rows[index]]
    for row in simulated:
        start = time.perf_counter()
        validate_row(row)
        timed.append((time.perf_counter() - start, row["name"]))
    total_s = sum(seconds for seconds, _ in timed)
    print(f"{len(rows)} rows in {len(timed)} simulations, {total_s:,.0f} s one after another; "
          f"the {args.slowest} slowest:")
    for seconds, name in sorted(timed, reverse=True)[:args.slowest]:
        print(f"  {seconds:7.1f} s  {name}")
    print(f"{args.jobs} workers, rows in the file's order: "
          f"{makespan_s([seconds for seconds, _ in timed], args.jobs):,.0f} s; "
          f"the work shared evenly: {total_s / args.jobs:,.0f} s")


if __name__ == "__main__":
    main()

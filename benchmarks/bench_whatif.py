"""Speed of asymmetric what-ifs: `python benchmarks/bench_whatif.py [--repeat N] [--small-gbs N]`.

Prints the wall time of `run_scenario` on the default study (DeepSeek-V3, 256 GB300 GPUs,
folded) and of the same study with a straggler GPU and with a degraded NIC or NVLink port,
which unfold the classes of GPUs they touch; then, at a small global batch where simulating
every GPU is affordable, the partly unfolded straggler run against the fully unfolded one
(their step times must agree). Pin it to one core with `taskset -c 0`.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from simulator.scenario import Result, Scenario, default_scenario, run_scenario

WHAT_IFS = {
    "folded (no what-if)": {},
    "straggler GPU 17 x1.2": {"straggler_gpu": 17, "straggler_slowdown": 1.2},
    "NIC of GPU 17 at 50 %": {"degraded_link": "nic:17", "degraded_link_bandwidth_fraction": 0.5},
    "NVLink of GPU 17 at 50 %": {"degraded_link": "nvlink:17",
                                 "degraded_link_bandwidth_fraction": 0.5},
}


def _timed(scenario: Scenario, repeat: int, folded: bool = True) -> tuple[float, Result]:
    seconds, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = run_scenario(scenario, folded=folded)
        seconds.append(time.perf_counter() - start)
    assert result is not None
    return statistics.median(seconds), result


def _line(label: str, seconds: float, result: Result) -> str:
    return (f"  {label:<28} {seconds:6.2f} s wall   {len(result.trace.simulated_ranks):4d} "
            f"simulated ranks   step {result.metrics.step_time_s:7.4f} s   "
            f"{result.metrics.tflops_per_gpu:6.0f} TFLOP/s/GPU")


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--repeat", type=int, default=1)
    options.add_argument("--small-gbs", type=int, default=256,
                         help="global batch of the fully unfolded comparison (0: skip it)")
    args = options.parse_args()
    base = default_scenario()
    print(f"default study, 256 GPUs, GBS {base.plan.gbs} (median of {args.repeat}):")
    for label, what_if in WHAT_IFS.items():
        print(_line(label, *_timed(replace(base, **what_if), args.repeat)))
    if args.small_gbs:
        small = replace(base, plan=replace(base.plan, gbs=args.small_gbs))
        slow = replace(small, **WHAT_IFS["straggler GPU 17 x1.2"])
        print(f"same study at GBS {args.small_gbs}, straggler GPU 17 x1.2:")
        print(_line("folded, no what-if", *_timed(small, args.repeat)))
        partly = _timed(slow, args.repeat)
        unfolded = _timed(slow, 1, folded=False)
        print(_line("partly unfolded", *partly))
        print(_line("fully unfolded (--unfolded)", *unfolded))
        steps = [timed[1].metrics.step_time_s for timed in (partly, unfolded)]
        print(f"  step times differ by {abs(steps[0] / steps[1] - 1):.1e} (relative); the "
              f"partly unfolded run is {unfolded[0] / partly[0]:.0f}x faster")


if __name__ == "__main__":
    main()

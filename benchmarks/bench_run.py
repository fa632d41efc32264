"""Speed of the default study: `python benchmarks/bench_run.py [--repeat N]`.

Prints the wall time of the whole `moesim run` command (fresh interpreter, imports included)
and of its phases in-process, at `run_scenario`'s collector pace (simulator.collector):
building the task graph, replaying it, and the figures of the replay (tasks, SimPy events per
second). Pin it to one core with `taskset -c 0`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from simulator.collector import sparse_collections
from simulator.engine import simulate
from simulator.scenario import default_scenario, scenario_topology
from workloads.step import StepSpec, build_step


def _command_s() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "simulator", "run"], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _phases_s() -> tuple[float, float, int]:
    scenario = default_scenario()
    with sparse_collections():
        start = time.perf_counter()
        graph = build_step(StepSpec(model=scenario.model, plan=scenario.plan,
                                    recipe=scenario.recipe))
        built = time.perf_counter()
        simulate(graph, scenario_topology(scenario), scenario.params,
                 nvls=scenario.recipe.nccl_nvls)
        return built - start, time.perf_counter() - built, len(graph.tasks)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--repeat", type=int, default=3)
    repeat = options.parse_args().repeat
    commands = [_command_s() for _ in range(repeat)]
    phases = [_phases_s() for _ in range(repeat)]
    print(f"moesim run (default study), wall time over {repeat} runs: "
          f"median {statistics.median(commands):.2f} s, min {min(commands):.2f} s")
    print(f"  build task graph: median {statistics.median(p[0] for p in phases):.2f} s "
          f"({phases[0][2]:,} tasks, 2 simulated ranks)")
    print(f"  replay:           median {statistics.median(p[1] for p in phases):.2f} s "
          f"({phases[0][2] / statistics.median(p[1] for p in phases):,.0f} tasks/s)")


if __name__ == "__main__":
    main()

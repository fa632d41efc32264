"""Chrome / Perfetto trace of a simulated step: one process per GPU, one track per lane.

Open the file in https://ui.perfetto.dev or chrome://tracing. Each task is a complete event
("ph": "X") with microsecond timestamps; its args carry the category, micro batch and chunk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from reports.files import write_json

LANE_ORDER = ("host", "compute", "ep", "tp", "cp", "pp", "dp")


def _lane_id(lane: str) -> int:
    return LANE_ORDER.index(lane) if lane in LANE_ORDER else len(LANE_ORDER)


def _names(records: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for rank in sorted({r["rank"] for r in records}):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                       "args": {"name": f"GPU {rank}"}})
        for lane in sorted({r["lane"] for r in records if r["rank"] == rank}, key=_lane_id):
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": _lane_id(lane),
                           "args": {"name": lane}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": rank,
                           "tid": _lane_id(lane), "args": {"sort_index": _lane_id(lane)}})
    return events


def chrome_trace(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The trace document; `records` have name, rank, lane, category, start_s, end_s,
    microbatch and chunk."""
    rows = list(records)
    events = _names(rows)
    for r in rows:
        if r["end_s"] <= r["start_s"] and r["lane"] == "compute":
            continue
        events.append({"ph": "X", "name": r["name"].split("/", 1)[-1], "cat": r["category"],
                       "pid": r["rank"], "tid": _lane_id(r["lane"]), "ts": r["start_s"] * 1e6,
                       "dur": (r["end_s"] - r["start_s"]) * 1e6,
                       "args": {"microbatch": r["microbatch"], "chunk": r["chunk"]}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(path: str | Path, records: Iterable[Mapping[str, Any]]) -> None:
    write_json(path, chrome_trace(records))

"""The calibration file `moesim calibrate` writes: each fitted parameter with its value,
bounds and meaning, the values a partial refit held (`fixed`), the command, the data's SHA-256
and the fit's error before and after."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from reports.files import write_text

HEADER = ("# moesim calibration: global cost-model parameters fitted by `moesim calibrate`.\n"
          "# Load with `moesim run --calibration FILE` (or `moesim validate ... --calibration`).\n")


def write_calibration(path: str | Path, document: Mapping[str, Any]) -> None:
    """`document`: command, data, data_sha256, rows_used, rows_failed, rms_log_error,
    parameters (key -> value, bounds, meaning), optionally fixed (key -> value, meaning)."""
    write_text(path, HEADER + yaml.safe_dump(dict(document), sort_keys=False, width=100))

"""Writing files whole or not at all: write a sibling temporary file, then rename it."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def write_text(path: str | Path, text: str) -> None:
    """Write `text` to `path` atomically; a failure leaves no partial file behind."""
    target = Path(path)
    if target.parent and not target.parent.exists():
        raise ValueError(f"output {str(target)!r}: folder {str(target.parent)!r} does not exist")
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


def write_json(path: str | Path, document: Any) -> None:
    write_text(path, json.dumps(document, indent=1) + "\n")


def save_png(figure: "Figure", path: str | Path) -> None:
    """Write the figure to path as a PNG, whole or not at all (temporary file, then rename)."""
    target = Path(path)
    folder = target.parent
    if not folder.is_dir():
        raise ValueError(f"output {str(target)!r}: folder {str(folder)!r} does not exist")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".png")
    os.close(handle)
    try:
        figure.savefig(temporary, format="png", dpi=110)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise

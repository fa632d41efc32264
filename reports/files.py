"""Writing files whole or not at all: write a sibling temporary file, then rename it.

A written file gets the mode a plain `open(path, "w")` would give it (0o666 less the umask,
usually 0644), not the 0600 of the temporary file it starts as.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NEW_FILE_MODE = 0o666
FIGURE_FORMATS = ("png", "svg", "pdf")


def _umask() -> int:
    """The process umask (os.umask can only be read by setting it, so it is set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_output_path(path: str | Path) -> None:
    """Raise a one-line error unless `path` names a file in an existing folder, so that a
    command can refuse an output it could not write before it does its work."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"output {str(target)!r}: is a folder; name a file")
    if not target.parent.is_dir():
        raise ValueError(f"output {str(target)!r}: folder {str(target.parent)!r} does not exist")


def check_output_folder(path: str | Path) -> None:
    """Raise a one-line error unless `path` is a folder or can be made one (its nearest
    existing ancestor is a folder)."""
    target = Path(path)
    existing = next((p for p in (target, *target.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        what = "is a file" if existing == target else f"is inside the file {str(existing)!r}"
        raise ValueError(f"output folder {str(target)!r}: {what}; name a folder")


def _write_atomically(path: str | Path, write: Callable[[Path], object], suffix: str = "") -> None:
    """Let `write` fill a sibling temporary file, give it the usual mode, rename it to `path`;
    a failure leaves no partial file behind."""
    check_output_path(path)
    target = Path(path)
    folder = target.parent
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=suffix)
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, NEW_FILE_MODE & ~_umask())
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


def write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` whole or not at all."""
    _write_atomically(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` whole or not at all."""
    _write_atomically(path, lambda temporary: temporary.write_bytes(data))


def write_json(path: str | Path, document: Any) -> None:
    write_text(path, json.dumps(document, indent=1) + "\n")


def figure_format(path: str | Path) -> str:
    """The format a figure at `path` is written in, from its extension (png, svg or pdf)."""
    extension = Path(path).suffix.lower().lstrip(".")
    if extension not in FIGURE_FORMATS:
        raise ValueError(f"output {str(path)!r}: extension {extension or '(none)'!r}; a figure "
                         f"is written as {', '.join('.' + f for f in FIGURE_FORMATS)}")
    return extension


def check_figure_path(path: str | Path) -> None:
    """`check_output_path`, and a figure format the extension names."""
    check_output_path(path)
    figure_format(path)


def save_figure(figure: "Figure", path: str | Path) -> None:
    """Write the figure to `path` in the format its extension names, whole or not at all."""
    extension = figure_format(path)
    _write_atomically(path, lambda temporary: figure.savefig(temporary, format=extension,
                                                             dpi=110),
                      suffix=f".{extension}")

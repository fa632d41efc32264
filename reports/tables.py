"""Aligned plain-text tables from rows of plain values (what `moesim list` and `show` print).

A row is a mapping of column -> value. Text is left-aligned, numbers right-aligned; a float
column gets one number of decimals for all its cells, the fewest that show every cell to
4 significant digits (at most 2 decimals), so decimal points line up:

    3.35, 4.8, 8.0  ->  3.35, 4.80, 8.00        989.4, 1978.9  ->  989.4, 1,978.9

Integers get thousands separators, booleans print as yes/no, missing values and None as "-",
lists and tuples as comma-separated items. `counted` writes a count with its noun, "1 row",
"2 rows".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

MISSING = "-"
SIGNIFICANT_DIGITS = 4
MAX_DECIMALS = 2


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and the noun, plural unless the count is one (`plural`, else noun + "s")."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _decimals(value: float) -> int:
    """Decimals that show value to SIGNIFICANT_DIGITS digits (capped), trailing zeros dropped."""
    if not math.isfinite(value) or value == 0:
        return 0
    digits_before_point = max(1, math.floor(math.log10(abs(value))) + 1)
    wanted = min(MAX_DECIMALS, max(0, SIGNIFICANT_DIGITS - digits_before_point))
    text = f"{value:.{wanted}f}"
    return len(text.rstrip("0").split(".")[1]) if "." in text else 0


def _column_decimals(rows: Sequence[Mapping[str, Any]], column: str) -> int:
    floats = [row[column] for row in rows
              if isinstance(row.get(column), float) and math.isfinite(row[column])]
    return max((_decimals(value) for value in floats), default=0)


def _cell(value: Any, decimals: int) -> str:
    """The text of one cell; floats use their column's decimals."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{decimals}f}" if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(item, decimals) for item in value) or MISSING
    return str(value)


def _numeric_column(rows: Sequence[Mapping[str, Any]], column: str) -> bool:
    """Whether every value present in the column is a number (its header is right-aligned)."""
    values = [row[column] for row in rows if row.get(column) is not None]
    return bool(values) and all(_is_number(value) for value in values)


def _columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every key of every row, in order of first appearance."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def format_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """The rows as an aligned table: a header, a rule of dashes, one line per row.

    columns picks and orders the columns (default: every key, in order of first appearance);
    a row without a column shows "-". Headers and missing cells of all-number columns are
    right-aligned like their numbers.
    """
    names = list(columns) if columns is not None else _columns(rows)
    decimals = {name: _column_decimals(rows, name) for name in names}
    numeric = [_numeric_column(rows, name) for name in names]
    cells = [[(_cell(row.get(name), decimals[name]),
               _is_number(row.get(name)) or (right and row.get(name) is None))
              for name, right in zip(names, numeric)] for row in rows]
    widths = [max([len(name)] + [len(line[i][0]) for line in cells])
              for i, name in enumerate(names)]
    header = "  ".join(name.rjust(width) if right else name.ljust(width)
                       for name, width, right in zip(names, widths, numeric))
    rule = "  ".join("-" * width for width in widths)
    body = ["  ".join(text.rjust(width) if right else text.ljust(width)
                      for (text, right), width in zip(line, widths)) for line in cells]
    return "\n".join(line.rstrip() for line in (header, rule, *body))

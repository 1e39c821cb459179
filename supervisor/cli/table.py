"""Text tables in the layout of ``kubectl get``: an upper-case header, left-aligned columns three
spaces apart, ``-`` for an empty cell (pure)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["format_table", "format_duration"]

_GAP = "   "


def format_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """The table as text, one line per row after the header (trailing spaces stripped)."""
    cells = [[str(h).upper() for h in header]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    return "\n".join(_GAP.join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells)


def _cell(value: object) -> str:
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def format_duration(seconds: float) -> str:
    """``42s``, ``3m07s``, ``5h02m00s``."""
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return (
        f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    )

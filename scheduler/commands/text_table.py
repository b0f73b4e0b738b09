"""Plain-text tables for the commands' ``--format table`` output (``kaidash schedule``, ``eta``, ``cost``)."""

from __future__ import annotations


def text_table(headers: list[str], rows: list[list[str]], max_last: int = 0) -> str:
    """``headers`` and ``rows`` (strings) as left-aligned columns under a dashed rule, one line per row.

    ``max_last``: cut the last column to that many characters (with ``…``), so a long message does not wrap the
    terminal; 0 keeps it whole.
    """
    if max_last:
        rows = [r[:-1] + [r[-1] if len(r[-1]) <= max_last else r[-1][: max_last - 1] + "…"] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines) + "\n"


__all__ = ["text_table"]

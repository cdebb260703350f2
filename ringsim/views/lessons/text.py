"""Text a lesson prints: ``Markdown`` (rendered as text by JupyterLab and the book) and
narrow aligned tables (``table``)."""

from __future__ import annotations


class Markdown:
    """Markdown that JupyterLab and the book both render as text (``_repr_markdown_``)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


def table(rows: list[dict], columns: dict[str, str], *, width: int = 88) -> str:
    """A plain-text table of ``rows`` (dicts) for ``print``: ``columns`` maps a key to its
    format spec (``"{:.2f}"``) with the header being the key (``None`` prints ``-``). Refuses
    to exceed ``width`` characters, the book's code column, so nothing is cut off at the right
    edge."""
    cells = [
        ["-" if row[key] is None else fmt.format(row[key]) for key, fmt in columns.items()]
        for row in rows
    ]
    heads = list(columns)
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(cell, widths, strict=True)) for cell in cells]
    too_wide = max(len(line) for line in lines)
    if too_wide > width:
        raise ValueError(f"table is {too_wide} characters wide, more than width={width}")
    return "\n".join(lines)

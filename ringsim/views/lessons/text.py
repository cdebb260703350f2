"""Text a lesson prints: ``Markdown`` (rendered as text by JupyterLab and the book) and
aligned tables (``table``): plain text for ``print`` and a terminal, an HTML table for a
notebook and the book (``display``), which on a phone scrolls sideways in its own box."""

from __future__ import annotations

import html
import re


class Markdown:
    """Markdown that JupyterLab and the book both render as text (``_repr_markdown_``)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def _repr_markdown_(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text


NUMBER = re.compile(r"^([-+]?[\d,]*\.?\d+(e[-+]?\d+)?\s?(%|x)?|-)$")  # a cell that is a number


class Table(str):
    """A table's text (a ``str``: ``print`` it), which also shows itself as an HTML table
    (``_repr_html_``) in a box that scrolls sideways when it is wider than the screen."""

    def __new__(cls, text: str, heads: list[str], cells: list[list[str]]):
        table = super().__new__(cls, text)
        table.heads, table.cells = heads, cells
        return table

    def __repr__(self) -> str:
        return str.__str__(self)

    def _repr_pretty_(self, printer, cycle: bool) -> None:  # IPython's text/plain
        printer.text(str.__str__(self))

    def _repr_html_(self) -> str:
        numeric = [all(NUMBER.match(row[i]) for row in self.cells) for i in range(len(self.heads))]

        def row(tag: str, values: list[str]) -> str:
            items = "".join(
                f'<{tag} class="{"rs-num" if numeric[i] else "rs-text"}">{html.escape(v)}</{tag}>'
                for i, v in enumerate(values)
            )
            return f"<tr>{items}</tr>"

        body = "".join(row("td", cells) for cells in self.cells)
        return (
            '<div class="rs-table"><table><thead>'
            f"{row('th', self.heads)}</thead><tbody>{body}</tbody></table></div>"
        )


def table(rows: list[dict], columns: dict[str, str], *, width: int = 88) -> Table:
    """A table of ``rows`` (dicts): ``columns`` maps a key to its format spec (``"{:.2f}"``)
    with the header being the key (``None`` prints ``-``). As text it refuses to exceed
    ``width`` characters, the book's code column, so nothing is cut off at the right edge."""
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
    return Table("\n".join(lines), heads, [[c.strip() for c in cell] for cell in cells])

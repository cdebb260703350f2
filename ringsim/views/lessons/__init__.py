"""What the lessons share, by role: how a lesson runs (``running``), its figures
(``figures``), the ring step-through view (``ring_story``), one notation and glossary
(``notation``), exercises and implement-and-test checks (``exercises``), the papers they cite
(``references``) and the text they print (``text``). The names a lesson uses are importable
from here, so a lesson's helpers come in one import."""

from __future__ import annotations

from ringsim.views.lessons.exercises import (
    Exercise,
    check_delta,
    check_merge,
    check_zigzag,
    exercises,
    try_it,
)
from ringsim.views.lessons.figures import (
    caption,
    figure_report,
    legends_over_data,
    use_lesson_style,
)
from ringsim.views.lessons.notation import GLOSSARY, NOTATION, notation, notation_page
from ringsim.views.lessons.references import references
from ringsim.views.lessons.ring_story import (
    animation_html,
    draw_ring_step,
    ring_animation,
    ring_story,
)
from ringsim.views.lessons.running import lesson_scale, scaled, static_book
from ringsim.views.lessons.text import Markdown, table

__all__ = [
    "GLOSSARY",
    "NOTATION",
    "Exercise",
    "Markdown",
    "animation_html",
    "caption",
    "check_delta",
    "check_merge",
    "check_zigzag",
    "draw_ring_step",
    "exercises",
    "figure_report",
    "legends_over_data",
    "lesson_scale",
    "notation",
    "notation_page",
    "references",
    "ring_animation",
    "ring_story",
    "scaled",
    "static_book",
    "table",
    "try_it",
    "use_lesson_style",
]

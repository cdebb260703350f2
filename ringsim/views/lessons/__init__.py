"""What the lessons share, by role: how a lesson runs (``running``), its figures
(``figures``), the ring step-through view (``ring_story``), one notation and glossary
(``notation``), exercises and implement-and-test checks (``exercises``), the papers they cite
(``references``), the text they print (``text``), the words they compare numbers with
(``words``), the capstone's checker (``capstone``) and what they take from the real backend
(``real_code``). The lessons reach all of it through ``ringsim.teach``, the teaching face."""

from __future__ import annotations

from ringsim.views.lessons.capstone import Choice, Verdict, check_choice
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
    panels,
    plain_log_ticks,
    use_lesson_style,
)
from ringsim.views.lessons.notation import GLOSSARY, NOTATION, notation, notation_page
from ringsim.views.lessons.real_code import measure_real_ring, real_ring_loop, record_real_ring
from ringsim.views.lessons.references import references
from ringsim.views.lessons.ring_story import (
    animation_html,
    draw_ring_step,
    ring_animation,
    ring_story,
)
from ringsim.views.lessons.running import lesson_scale, scaled, static_book
from ringsim.views.lessons.text import Markdown, Table, table
from ringsim.views.lessons.words import compared, near_zero, number_word, times

__all__ = [
    "GLOSSARY",
    "NOTATION",
    "Choice",
    "Exercise",
    "Markdown",
    "Table",
    "Verdict",
    "animation_html",
    "caption",
    "check_choice",
    "check_delta",
    "check_merge",
    "check_zigzag",
    "compared",
    "draw_ring_step",
    "exercises",
    "figure_report",
    "legends_over_data",
    "lesson_scale",
    "measure_real_ring",
    "near_zero",
    "notation",
    "notation_page",
    "number_word",
    "panels",
    "plain_log_ticks",
    "real_ring_loop",
    "record_real_ring",
    "references",
    "ring_animation",
    "ring_story",
    "scaled",
    "static_book",
    "table",
    "times",
    "try_it",
    "use_lesson_style",
]

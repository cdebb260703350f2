"""Views: what people look at. Gantt timelines, sweeps and mask pictures (``plots``, with
matplotlib, imported only when a figure is drawn), Chrome/Perfetto traces (``trace``), the
planner's time-against-memory figure (``planning``), predicted against published
(``validation``), the book's ring explorer data (``explorer``) and the helpers the lessons
share (``lessons``, a package by role: running, figures, ring_story, notation, exercises,
references, text). Views may import the core, the numerics and the timer; nothing below
imports a view.
"""

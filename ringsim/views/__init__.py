"""Views: what people look at. Gantt timelines, sweeps and mask pictures (``plots``, with
matplotlib, imported only when a figure is drawn), Chrome/Perfetto traces (``trace``) and the
helpers the lessons share (``lessons_support``). Views may import the core, the numerics and the
timer; nothing below imports a view.
"""

"""Values only the command line reads: a model name and a kernel family name (they look their
argument up in the timer's registries). Every other parser lives in ``ringsim.values``."""

from __future__ import annotations


def parse_model(name: str, text: str) -> str:
    """A model of ``ringsim.timer.step.models.MODELS`` (llama3-8b, 7b, ...)."""
    from ringsim.timer.step.models import get_model

    return get_model(text).name


def parse_implementation(name: str, text: str) -> str:
    from ringsim.timer.machine.families import get_family

    return get_family(text).name

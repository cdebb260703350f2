"""The ``ringsim`` command: simulate a ring, sweep it, size its memory, list the hardware.

One module per subcommand (``simulate``, ``sweep``, ``memory``, ``plan``, ``validate``,
``compare``, ``presets``, ``demo``), each with ``HELP``, ``EXAMPLES``, ``add_arguments`` and
``run``; the flags they share live in ``args``, the checks after the work in ``checks``, the
printing in ``output``; the values they parse in ``ringsim.values`` and output paths are checked by
``ringsim.files.check_outputs`` (both shared with the real backend's own command lines, which
never import this package). ``calibrate`` and ``measure`` are forwarded to the real backend
(``kernels``) by module name, at run time. Every subcommand prints a table for people (rich
when installed, plain text otherwise) and, with ``--json``, one JSON document for scripts. Bad
input ends in one line on stderr naming the value, and exit code 2. Only what a command needs
is imported: matplotlib when it plots, rich when it prints a table to a terminal, torch only
for ``calibrate`` and ``measure``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ringsim.cli import compare, memory, plan, presets, simulate, sweep, validate
from ringsim.cli.output import guarded, to_jsonable
from ringsim.files import check_outputs
from ringsim.values import Parser, error_line, wants_json

__all__ = ["build_parser", "guarded", "main", "to_jsonable"]

SUBCOMMANDS = {
    "simulate": simulate,
    "presets": presets,
    "sweep": sweep,
    "memory": memory,
    "plan": plan,
    "validate": validate,
    "compare": compare,
}

FORWARDED = {
    "demo": ("ringsim.cli.demo", "main", "matplotlib (pip install matplotlib)"),
    "calibrate": (
        "kernels.calibration.calibrate",
        "calibrate_main",
        "the real backend and torch (pip install -e '.[torch]')",
    ),
    "measure": (
        "kernels.calibration.measure",
        "measure_main",
        "the real backend and torch (pip install -e '.[torch]')",
    ),
}


# -- forwarded subcommands ------------------------------------------------------------------
def run_forwarded(command: str, argv: list[str]) -> int:
    module_name, function, needs = FORWARDED[command]
    try:
        module = importlib.import_module(module_name)
        entry = getattr(module, function)
    except (ImportError, AttributeError) as err:
        message = f"{module_name}.{function} is not available ({err}); it needs {needs}"
        sys.stderr.write(error_line(f"ringsim {command}", message, as_json=wants_json(argv)))
        return 2
    try:
        return guarded(f"ringsim {command}", lambda: entry(argv), as_json=wants_json(argv))
    except SystemExit as exit_:  # its parser's verdict (--help: 0, a bad flag: 2), as main's
        return exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)


EPILOG = """examples:
  ringsim demo                                   three layouts side by side, and a figure
  ringsim simulate --hosts 8 --seq-len 64K --causal --layout zigzag
  ringsim sweep --vary block --plot block.png
  ringsim memory --model 7b --hardware a100-nvlink --hosts 8
  ringsim plan --model 7b --seq-len 1M --cluster dgx-h100 --hosts 64
  ringsim compare rank0.json rank1.json          a recorded ring against the simulated one
  ringsim <command> --help                       flags and examples of one command"""


def build_parser() -> argparse.ArgumentParser:
    from ringsim import __version__

    parser = Parser(
        prog="ringsim",
        description="An exact, event-timed simulator of Ring Attention.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ringsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, module in SUBCOMMANDS.items():
        p = sub.add_parser(
            name,
            help=module.HELP,
            description=module.HELP,
            epilog=module.EXAMPLES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
    for name, help_ in (
        ("demo", "a short tour: three layouts side by side, a table and a figure"),
        ("calibrate", "measure this machine into a hardware profile (torch)"),
        ("measure", "run the real backend; measured vs predicted (torch)"),
    ):
        sub.add_parser(name, help=help_, add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ringsim`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in FORWARDED:
        return run_forwarded(argv[0], argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 2

    def run() -> int | None:
        check_outputs(args)  # every output path, before any work or any file written
        return args.run(args)

    return guarded(f"ringsim {args.command}", run, as_json=bool(getattr(args, "json", False)))

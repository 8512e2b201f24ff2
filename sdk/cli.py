"""`day0 ...`: the command line. Each command lives in `sdk/commands/<name>.py` and exposes
`register(subparsers)`; its handler returns an exit code. A `Day0Error` becomes one line and exit 2."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__
from .errors import Day0Error

COMMANDS = ("backends", "conformance", "model", "merge", "ops", "report", "coverage", "devices", "scaffold",
            "simulate")


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and exit 2, like every other user error (the
    day0 command and the scripts beside it)."""

    def error(self, message: str) -> None:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="day0", description="Bring up Triton on a new accelerator and prove, kernel by "
                     "kernel, which models run on it.")
    parser.add_argument("--version", action="version", version=f"day0 {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"sdk.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"sdk.commands.{name}":
                continue  # command not shipped in this build
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    if args.command not in ("devices",):  # every other command drives Triton
        from .diagnose import triton_import_error
        problem = triton_import_error()
        if problem:
            print(f"day0: error: {problem}", file=sys.stderr)
            return 2
    try:
        return int(args.func(args) or 0)
    except Day0Error as exc:
        print(f"day0: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("day0: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output stopped early (`| head`): as a shell would
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 141
    except OSError as exc:  # a path the user gave: missing folder, no permission, a file not a folder
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"day0: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except RecursionError:
        print("day0: error: an input is nested too deeply to read", file=sys.stderr)
        return 2
    except Exception as exc:  # nothing a user can fix: a day0 bug, said so in one line, exit 1
        if os.environ.get("DAY0_DEBUG"):
            raise
        text = " ".join(str(exc).split())[:300]
        print(f"day0: internal error (a day0 bug, please report it): {type(exc).__name__}: {text} "
              f"(DAY0_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

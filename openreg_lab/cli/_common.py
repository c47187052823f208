"""What the commands share: the parser class, usage errors, argument checks and terminal tables."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO

from openreg_lab.recording import atomic
from openreg_lab.recording.text import visible

#: Exit status for bad arguments (as argparse uses).
USAGE = 2


class UsageError(Exception):
    """A bad argument found after parsing (a missing file, an unknown profile): one line, exit 2."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr (and exit status 2).

    Epilogs are printed as written, so that each command's ``--help`` can end with examples.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        """Print ``prog: error: message (see --help)`` and exit with status 2."""
        self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def say(text: str, stream: TextIO | None = None) -> None:
    """Write ``text`` and its newline to ``stream`` (default stderr) in one call, and flush.

    ``print`` writes a line's text and its newline separately. Under ``PYTHONUNBUFFERED`` each is its
    own system call, and the ranks of a torchrun job, which share one pipe, split each other's lines.
    A single write of up to ``PIPE_BUF`` bytes (4 KiB on Linux) to a pipe is never split.
    A lone surrogate (a file name's undecodable byte) is written as its escape, ``\\udcXX``.
    """
    out = stream or sys.stderr
    out.write(visible(text) + "\n")  # a file name's undecodable byte as \\udcXX, whatever the stream's errors
    out.flush()


def usage_exit(prog: str, error: UsageError) -> int:
    """Print a ``UsageError`` as one line and return the usage exit status."""
    message = " ".join(str(error).split())
    say(f"{prog}: error: {message}")
    return USAGE


def positive_int(text: str) -> int:
    """argparse type: an integer of at least 1."""
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def check_output(path: str | None, option: str) -> None:
    """Raise ``UsageError`` unless ``path`` (the value of ``option``) can be written as a file.

    Checked before any work is done, so that a long run does not end by failing to save.
    """
    if path is None:
        return
    if path == "":
        raise UsageError(f"{option}: empty path")
    refused = atomic.refusal(path)  # Note [Where an output may go]
    if refused is not None:
        raise UsageError(f"{option} {path}: {refused}; give a file's path")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"{option} {path}: directory {directory} does not exist")
    target = path if os.path.exists(path) else directory
    if not os.access(target, os.W_OK):
        raise UsageError(f"{option} {path}: not writable")


def check_output_directory(path: str | None, option: str) -> None:
    """Raise ``UsageError`` unless ``path`` (the value of ``option``) is a directory files can be
    written in, or a new one its parent can hold (it is made when the outputs are written)."""
    if path is None:
        return
    if path == "":
        raise UsageError(f"{option}: empty path")
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise UsageError(f"{option} {path}: is not a directory; give a directory (a file a rank)")
        if not os.access(path, os.W_OK | os.X_OK):
            raise UsageError(f"{option} {path}: not writable")
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: {parent} is not writable")


def check_distinct(outputs: Sequence[tuple[str, str | None]], inputs: Sequence[tuple[str, str]] = ()) -> None:
    """Raise ``UsageError`` when two ``outputs`` (option, path) are one file, or an output is one of
    the command's ``inputs`` (what, path; ``"the script"``): writing it would replace it. Paths are
    compared by what they name (the same device and inode, or the same path once links are
    resolved for a file not made yet), not as strings."""
    seen = {_identity(path): what for what, path in inputs}
    for option, path in outputs:
        if path is None:
            continue
        other = seen.setdefault(_identity(path), option)
        if other != option:
            raise UsageError(f"{option} {path}: the same file as {other}; give each output its own path")


def _identity(path: str) -> object:
    """What ``path`` names: its device and inode when it exists, else its resolved path."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return os.path.realpath(path)
    return (st.st_dev, st.st_ino)


def check_profile(profile: str | None) -> None:
    """Raise ``UsageError`` unless ``profile`` names a built-in profile or a readable profile file."""
    if profile is None:
        return
    import openreg_lab

    try:
        openreg_lab.profile_ops(profile)
    except (ValueError, OSError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UsageError(f"--profile {profile}: {first}") from None


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[bool]) -> str:
    """Align ``rows`` under ``headers`` in columns two spaces apart (``right``: right-align a column)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.rjust(w) if ra else c.ljust(w) for c, w, ra in zip(r, widths, right, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def ms(ns: float) -> str:
    """Nanoseconds as milliseconds with two decimals."""
    return f"{ns / 1e6:.2f}"

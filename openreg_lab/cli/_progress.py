"""Progress on stderr while ``run`` runs a script: elapsed time and events recorded so far
(``openreg_lab.recording.session.events_so_far``, one atomic read), updated in place on a terminal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TextIO


class Progress:
    """A daemon thread that reports the elapsed time on ``stream`` until ``stop()``.

    Nothing is shown for runs shorter than ``delay`` seconds. On a terminal the line is rewritten
    every ``tty_every`` seconds and erased at the end; otherwise a plain line is written every
    ``line_every`` seconds, so that logs stay readable.
    """

    def __init__(
        self,
        stream: TextIO,
        label: str,
        *,
        delay: float = 5.0,
        tty_every: float = 0.5,
        line_every: float = 30.0,
        count: Callable[[], int] | None = None,
    ) -> None:
        self.stream = stream
        self.count = count
        self.label = label
        self.delay = delay
        self.tty = _isatty(stream)
        self.every = tty_every if self.tty else line_every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="openreg-lab progress", daemon=True)
        self._start = 0.0
        self._shown = False

    def start(self) -> None:
        """Start counting (and, after ``delay`` seconds, reporting)."""
        self._start = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        """Stop reporting and erase the in-place line, if any."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.tty and self._shown:
            self._write("\r\x1b[K")

    def line(self) -> str:
        """The current progress message."""
        elapsed = time.monotonic() - self._start
        recorded = f", {self.count():,} events recorded" if self.count is not None else ", tracing"
        return f"{self.label}: {_clock(elapsed)} elapsed{recorded}"

    def _loop(self) -> None:
        if self._stop.wait(self.delay):
            return
        while True:
            self._shown = True
            if self.tty:
                self._write("\r\x1b[K" + self.line())
            else:
                self._write(self.line() + "\n")
            if self._stop.wait(self.every):
                return

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # the stream was closed under us; progress is optional
            self._stop.set()


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _clock(seconds: float) -> str:
    """``75.3`` -> ``1:15``; ``4.2`` -> ``4.2 s``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"

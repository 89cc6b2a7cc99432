"""`Progress`: how far a long job got (training steps, sentences translated,
pairs scored), on stderr.

On a terminal it is a tqdm bar with the rate and ETA, cleared before each
log record the root logger's handlers (absl's, in the tools) write, so that
a log line never lands inside the bar; the next update redraws it.
Elsewhere (a log file, CI) it is a plain line at most every `interval`
seconds and one at the end, which keeps the file readable, or nothing for
a job whose own log lines say how far it got (training).
"""

import datetime
import logging
import sys
import time


class Progress:
    """How many of `total` items (None: unknown) a job has done, on
    `stream` (default stderr). Closes itself when all `total` are done.

    Args:
        total: items the job will do, counting `initial`; None if unknown.
        verb: what the job does to an item ("translated").
        unit: what an item is ("sentences").
        initial: items done before (by an interrupted run being resumed).
        interval: seconds between plain lines off a terminal; None for no
            lines at all.
    """

    def __init__(
        self,
        total,
        verb="translated",
        unit="sentences",
        initial=0,
        interval=30.0,
        stream=None,
    ):
        self.total, self.verb, self.unit = total, verb, unit
        self.done = self.initial = initial
        self.interval = interval
        self.stream = stream or sys.stderr
        self.start = self.last_line = time.monotonic()
        self.closed = False
        self.bar = None
        if self.stream.isatty():
            # Not keras' Progbar: it writes to stdout, where translations go.
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                initial=initial,
                desc=verb,
                unit=f" {unit}",
                file=self.stream,
                dynamic_ncols=True,
            )
            self._clear_first = _ClearBefore(self.bar)
            self._handlers = list(logging.getLogger().handlers)
            for handler in self._handlers:
                handler.addFilter(self._clear_first)

    def update(self, count=1):
        """`count` more items done."""
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
        elif (
            self.interval is not None
            and time.monotonic() - self.last_line >= self.interval
        ):
            self._print_line()
        if self.total is not None and self.done >= self.total:
            self.close()

    def _print_line(self):
        self.last_line = time.monotonic()
        elapsed = self.last_line - self.start
        rate = (self.done - self.initial) / max(elapsed, 1e-9)
        text = f"{self.verb} {self.done}"
        if self.total is not None:
            text += f"/{self.total}"
        text += f" {self.unit}, {rate:.1f}/s"
        if self.total is not None and self.done < self.total and rate > 0:
            eta = datetime.timedelta(seconds=round((self.total - self.done) / rate))
            text += f", ETA {eta}"
        print(text, file=self.stream, flush=True)

    def close(self):
        if self.closed:
            return
        self.closed = True
        if self.bar is not None:
            for handler in self._handlers:
                handler.removeFilter(self._clear_first)
            self.bar.close()
        elif self.interval is not None:
            self._print_line()


class _ClearBefore(logging.Filter):
    """Clears `bar` before each record is written; filters nothing out."""

    def __init__(self, bar):
        super().__init__()
        self.bar = bar

    def filter(self, record):
        self.bar.clear()
        return True

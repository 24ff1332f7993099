"""Stopping when asked: one flag that Ctrl-C, SIGTERM, SIGHUP and lost output set, and every long
loop polls.

The first signal only sets the flag. The loops check it at safe points (between training steps,
evaluation batches, the honest loss's prefixes, scoring windows and sampled tokens) and raise
`Stopped` there: training then saves a checkpoint, and an evaluation cut short is never logged. A
second signal aborts at once: the handler itself raises `Aborted`, wherever the code is, and
`harness.cli.run_command` prints one line saying what is on disk and exits with 128 + the signal's
number. A checkpoint being written is finished first (`StopFlag.writing`); it is atomic anyway.
Where an exception cannot go on (a `__del__`, such as a progress bar's teardown, a finalizer, the
garbage collector's or an atexit callback), `StopFlag.unraisable` says the same line and ends the
process there; a later signal is ignored, and once run_command has ended, its `shut_down` leaves
every signal doing nothing.

Before that, while a script starts, a signal is one line too: `exit_on_signal` (its first act,
before the imports) exits at once, then `interrupt_on_signal` (run_command's first) raises
KeyboardInterrupt, which run_command reports.

SIGHUP (the terminal or the ssh session closed) stops like SIGTERM. So does output that can no
longer be written (`| head`, a closed stderr, a full disk behind stdout): harness/output.py turns
the failed write into a SIGPIPE, which the flag records like any signal, and the process stops
quietly with exit code 141 (128 + SIGPIPE), as Unix programs do on a closed pipe.

A signal the process was started ignoring stays ignored (`answered_signals`), in it and in the
processes it starts:
under `nohup`, the closed terminal's SIGHUP leaves the run going.
"""

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")
LOST_OUTPUT = signal.SIGPIPE  # what a write to a closed pipe raises: here, any output that is gone
NOTHING_SAVED = "interrupted; nothing was saved"  # a stop before any work
BEFORE_TRAINING = "interrupted before training started; nothing was saved"  # train.py's


class Stopped(Exception):
    """Raised at a safe point once a stop was asked for (a first signal, or lost output)."""

    def __init__(self, signum: int | None):
        super().__init__(
            f"stopped by {signal.Signals(signum).name if signum else 'another process of the job'}"
        )
        # None under torchrun for the processes that were not signalled themselves
        self.signum = signum


class Aborted(BaseException):
    """A second signal: raised by the handler wherever the code is. A BaseException, so that no
    `except Exception` on the way turns it into an error; atomic writes on the way remove their
    temporary file."""

    def __init__(self, signum: int, saved: str | None):
        name = signal.Signals(signum).name
        super().__init__(f"{name} again: aborted at once; {saved or 'nothing was saved'}")
        self.signum = signum


class StopFlag:
    """Signal handlers that record a stop (the first signal) or abort (the second), while the block
    runs.

    announce: the line printed on the first signal after the signal's name ("SIGTERM: stopping after
    this step..."), or None for quiet. on_signal: called with every signal received (compare.py
    passes each on to its train.py). saved: what is on disk now, for the abort line; training keeps
    it current.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, announce: str | None = None, on_signal: Callable[[int], None] | None = None):
        self.signum: int | None = None
        self.announce, self.on_signal = announce, on_signal
        self.saved: str | None = None
        self.abort_after_write: int | None = None
        self.in_write = self.aborting = False
        self.previous, self.previous_hook = {}, None

    def __enter__(self):
        # signal handlers live in the main thread
        if threading.current_thread() is threading.main_thread():
            self.previous = {
                sig: signal.signal(sig, self.handle) for sig in (*answered_signals(), LOST_OUTPUT)
            }
            self.previous_hook, sys.unraisablehook = sys.unraisablehook, self.unraisable
        return self

    def handle(self, signum, frame) -> None:
        # output is gone: stop, say nothing (there is nowhere to say it), never abort
        if signum == LOST_OUTPUT:
            self.signum = self.signum or signum
            return
        if self.on_signal is not None:
            self.on_signal(signum)
        if self.signum is None or self.signum == LOST_OUTPUT:
            self.signum = signum
            if self.announce:
                tqdm.write(f"\n{signal.Signals(signum).name}: {self.announce}")
        elif self.aborting:
            return  # the abort is under way: a third signal must not cut its clean-up short
        elif self.in_write:
            # the checkpoint being written is finished first: a second or so
            self.abort_after_write = signum
        else:
            self.aborting = True
            raise Aborted(signum, self.saved)

    def unraisable(self, unraisable) -> None:
        """sys.unraisablehook while the handlers are in place. An exception raised where it cannot
        go on (a `__del__`, a finalizer, the garbage collector's or an atexit callback) is printed
        by Python as "Exception ignored in ..." with a traceback, and the code carries on. A second
        signal lands there as readily as anywhere (tqdm's `__del__`, as a function returns): its
        Aborted then ends the process as run_command would, with its one line and exit code."""
        if isinstance(unraisable.exc_value, Aborted):
            # each bar's line ended, as its teardown would: the abort's line is one of its own
            for bar in list(tqdm._instances):
                with contextlib.suppress(Exception):
                    bar.close()
            exit_now(str(unraisable.exc_value), 128 + unraisable.exc_value.signum)
        self.previous_hook(unraisable)

    def poll(self) -> None:
        """A safe point: raise Stopped if a stop was asked for."""
        if self.signum is not None:
            raise Stopped(self.signum)

    @contextlib.contextmanager
    def writing(self):
        """A block that a second signal does not cut short (a checkpoint save); the abort comes
        right after it.
        """
        self.in_write = True
        try:
            yield
        finally:
            self.in_write = False
        if self.abort_after_write is not None:
            self.aborting = True
            raise Aborted(self.abort_after_write, self.saved)

    def polled(self, items: Iterable[T]) -> Iterator[T]:
        """The items, with a safe point before each (a stream of sampled tokens)."""
        for item in items:
            self.poll()
            yield item

    def __exit__(self, *exc) -> None:
        if self.signum is not None:
            # a stop was asked for: the process is ending, and a later signal still aborts through
            # this handler
            return
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        if self.previous_hook is not None:
            sys.unraisablehook = self.previous_hook


def answered_signals() -> list[int]:
    """The stop signals this process answers: all but those its launcher set to be ignored (nohup
    ignores SIGHUP, a shell script's `command &` SIGINT), so that the command outlives them; such a
    signal stays ignored, and so it is in the processes this one starts (exec keeps an ignored
    signal ignored). Nothing here sets SIG_IGN: shut_down's handler does nothing."""
    return [sig for sig in StopFlag.SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]


def exit_on_signal(message: str = NOTHING_SAVED) -> None:
    """A script's first act, before its imports (torch's take a second or more): until run_command
    takes over, Ctrl-C, SIGTERM or SIGHUP ends the process at once with `message` on stderr and exit
    code 128 + the signal's number, where Python would print a KeyboardInterrupt traceback (SIGINT)
    or end without a word (SIGTERM, SIGHUP). Nothing has begun, so nothing needs cleaning up. A
    signal that the launcher ignores (nohup) stays ignored. The signals are unblocked
    last: compare.py starts train.py with SIGINT blocked, so that a Ctrl-C passed on while it starts
    waits for this."""

    for sig in answered_signals():
        signal.signal(sig, lambda signum, frame: exit_now(message, 128 + signum))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, StopFlag.SIGNALS)


def exit_now(line: str, code: int) -> None:
    """End the process at once, nothing cleaned up: what stdout and stderr hold is written out, then
    `line` on stderr.
    """
    for stream in (sys.stdout, sys.stderr):
        # a stream gone or closed: there is nothing to write out
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):  # stderr closed: the exit code still says it
        os.write(2, f"{line}\n".encode())
    os._exit(code)


def interrupt_on_signal() -> None:
    """From run_command's start until a StopFlag takes over: Ctrl-C, SIGTERM or SIGHUP raises
    KeyboardInterrupt, carrying the signal's number, which run_command turns into its one line and
    exit code; the code on the way out cleans up (a half-written file is removed). Only the first
    signal raises: another would cut that clean-up short."""
    # signal handlers live in the main thread
    if threading.current_thread() is not threading.main_thread():
        return
    raised = []

    def handle(signum, frame):
        if not raised:
            raised.append(signum)
            interrupt = KeyboardInterrupt()
            interrupt.signum = signum
            raise interrupt

    for sig in answered_signals():
        signal.signal(sig, handle)

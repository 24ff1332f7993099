"""A stop flag that Ctrl-C, SIGTERM, SIGHUP and lost output set and long loops poll at safe points
(so training saves a checkpoint); a second signal aborts at once."""

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")
LOST_OUTPUT = signal.SIGPIPE  # any output that is gone
NOTHING_SAVED = "interrupted; nothing was saved"
BEFORE_TRAINING = "interrupted before training started; nothing was saved"


class Stopped(Exception):
    """signum None: another torchrun process stopped."""

    def __init__(self, signum: int | None):
        name = signal.Signals(signum).name if signum else "another process of the job"
        super().__init__(f"stopped by {name}")
        self.signum = signum


class Aborted(BaseException):
    """A second signal, raised wherever the code is: no `except Exception` may catch it."""

    def __init__(self, signum: int, saved: str | None):
        name = signal.Signals(signum).name
        super().__init__(f"{name} again: aborted at once; {saved or 'nothing was saved'}")
        self.signum = signum


class StopFlag:
    """In the block the first signal records a stop and the second aborts."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, announce: str | None = None, on_signal: Callable[[int], None] | None = None):
        self.signum: int | None = None
        self.announce, self.on_signal = announce, on_signal
        self.saved: str | None = None
        self.abort_after_write: int | None = None
        self.in_write = self.aborting = False
        self.previous, self.previous_hook = {}, None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            signals = (*answered_signals(), LOST_OUTPUT)
            self.previous = {sig: signal.signal(sig, self.handle) for sig in signals}
            self.previous_hook, sys.unraisablehook = sys.unraisablehook, self.unraisable
        return self

    def handle(self, signum, frame) -> None:
        if signum == LOST_OUTPUT:  # stop quietly, never abort
            self.signum = self.signum or signum
            return
        if self.on_signal is not None:
            self.on_signal(signum)
        if self.signum is None or self.signum == LOST_OUTPUT:
            self.signum = signum
            if self.announce:
                tqdm.write(f"\n{signal.Signals(signum).name}: {self.announce}")
        elif self.aborting:
            return  # a third signal must not cut the abort's clean-up short
        elif self.in_write:
            self.abort_after_write = signum  # the checkpoint being written is finished first
        else:
            self.aborting = True
            raise Aborted(signum, self.saved)

    def unraisable(self, unraisable) -> None:
        """An Aborted raised where it cannot propagate (tqdm's `__del__`) ends the process."""
        if isinstance(unraisable.exc_value, Aborted):
            for bar in list(tqdm._instances):
                with contextlib.suppress(Exception):
                    bar.close()
            exit_now(str(unraisable.exc_value), 128 + unraisable.exc_value.signum)
        self.previous_hook(unraisable)

    def poll(self) -> None:
        if self.signum is not None:
            raise Stopped(self.signum)

    @contextlib.contextmanager
    def writing(self):
        """A block (a checkpoint save) that a second signal does not cut short."""
        self.in_write = True
        try:
            yield
        finally:
            self.in_write = False
        if self.abort_after_write is not None:
            self.aborting = True
            raise Aborted(self.abort_after_write, self.saved)

    def polled(self, items: Iterable[T]) -> Iterator[T]:
        for item in items:
            self.poll()
            yield item

    def __exit__(self, *exc) -> None:
        if self.signum is not None:  # after a stop a later signal still aborts
            return
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        if self.previous_hook is not None:
            sys.unraisablehook = self.previous_hook


def answered_signals() -> list[int]:
    """The stop signals but those this process was started ignoring (nohup's SIGHUP)."""
    return [sig for sig in StopFlag.SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]


def exit_on_signal(message: str = NOTHING_SAVED) -> None:
    """Before a script's slow imports, a stop signal exits at once. compare.py starts train.py with
    SIGINT blocked, so a Ctrl-C passed on waits for this."""
    for sig in answered_signals():
        signal.signal(sig, lambda signum, frame: exit_now(message, 128 + signum))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, StopFlag.SIGNALS)


def exit_now(line: str, code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):  # stderr closed: the exit code still says it
        os.write(2, f"{line}\n".encode())
    os._exit(code)


def interrupt_on_signal() -> None:
    """Until a StopFlag takes over, the first stop signal raises KeyboardInterrupt; later ones are
    ignored, not to cut the clean-up short."""
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

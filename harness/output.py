"""Standard output and error that a closed pipe or a full disk cannot crash: a failed write stops
the process quietly with exit code 141."""

import contextlib
import errno
import io
import os
import signal
import sys

from harness.stopping import LOST_OUTPUT, Stopped


class GuardedStream:
    """A text stream whose first failed write signals a listening StopFlag, else raises Stopped if
    `stops`."""

    def __init__(self, stream, stops: bool = True):
        self.stream, self.stops, self.lost = stream, stops, False

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                self.stream.write(text)
            except UnicodeEncodeError:
                encoding = self.stream.encoding or "ascii"
                self.write(text.encode(encoding, errors="replace").decode(encoding))
            except (OSError, ValueError):  # ValueError: closed
                self.lose()
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self.stream.flush()
            except (OSError, ValueError):
                self.lose()

    def lose(self) -> None:
        self.lost = True
        # what is still buffered, and what C code writes, goes nowhere
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        if callable(signal.getsignal(LOST_OUTPUT)):  # a StopFlag
            signal.raise_signal(LOST_OUTPUT)
        elif self.stops:
            raise Stopped(LOST_OUTPUT)

    def isatty(self) -> bool:
        return not self.lost and self.stream.isatty()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def writable(stream) -> bool:
    """Open for writing (> /dev/full is)."""
    if stream is None:
        return False
    try:
        os.write(stream.fileno(), b"")
    except (AttributeError, io.UnsupportedOperation):  # in memory
        return True
    except OSError as e:
        return e.errno not in (errno.EBADF, errno.EINVAL)
    return True


@contextlib.contextmanager
def guarded_output():
    # a descriptor closed at start (2>&-) would be reused by the next file opened, a checkpoint say
    for fd in (1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_WRONLY)  # the lowest free descriptor: this one
    saved = sys.stdout, sys.stderr
    out, err = (s if writable(s) else open(os.devnull, "w") for s in saved)  # noqa: SIM115
    sys.stdout, sys.stderr = GuardedStream(out), GuardedStream(err, stops=False)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved

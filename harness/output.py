"""Standard output and error that a closed pipe or a full disk cannot crash: a failed write becomes
a stop.

run_command (harness/cli.py) puts `guarded_output` in place for the whole command. The first write
that fails (`| head`, a closed terminal, a full disk behind stdout) sends the process SIGPIPE, which
harness/stopping.py's StopFlag records like any stop signal: the loops stop at their next safe point
and the process ends quietly with exit code 141.
"""

import contextlib
import errno
import io
import os
import signal
import sys

from harness.stopping import LOST_OUTPUT, Stopped


class GuardedStream:
    """A text stream whose failed writes (a closed pipe, a full disk) become a stop, and whose text
    never fails to encode.

    The first failed write marks the stream lost and sends this process SIGPIPE: a StopFlag records
    it and the loops stop at their next safe point; without one, a write to stdout raises Stopped at
    once (there is nothing to save yet). Later writes go nowhere. Characters the stream's encoding
    lacks (a Latin-1 terminal) are replaced, not fatal.
    """

    def __init__(self, stream, stops: bool = True):
        self.stream = stream
        # without a StopFlag: whether a failed write ends the command (stdout), or is dropped
        # (stderr)
        self.stops = stops
        self.lost = False

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                try:
                    self.stream.write(text)
                except UnicodeEncodeError:
                    encoding = self.stream.encoding or "ascii"
                    self.stream.write(text.encode(encoding, errors="replace").decode(encoding))
            # EPIPE, ENOSPC, EIO, EBADF; ValueError: the file was closed
            except (OSError, ValueError):
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
        # io.UnsupportedOperation is both of the first two
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            # what is still buffered, and what C code writes, goes nowhere
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        if callable(signal.getsignal(LOST_OUTPUT)):
            # a StopFlag is listening: the loops stop at their next safe point
            signal.raise_signal(LOST_OUTPUT)
        elif self.stops:
            raise Stopped(LOST_OUTPUT)  # nothing to save yet: the command ends here

    def isatty(self) -> bool:
        return not self.lost and self.stream.isatty()

    def __getattr__(self, name):  # encoding, fileno, buffer...: the stream's own
        return getattr(self.stream, name)


def writable(stream) -> bool:
    """Whether a standard stream can be written at all: Python leaves it None when its descriptor
    was closed, and a launcher may have left a read-only file there (a shell script that execs
    python). A descriptor open for writing whose writes fail (> /dev/full: ENOSPC even for nothing)
    is writable: its output is lost, which stops."""
    if stream is None:
        return False
    try:
        # writes nothing, but fails on a descriptor not open for writing
        os.write(stream.fileno(), b"")
    # a stream in memory (a test's capture): writable
    except (AttributeError, io.UnsupportedOperation):
        return True
    except OSError as e:
        # closed or read-only, or no file to write to
        return e.errno not in (errno.EBADF, errno.EINVAL)
    return True


@contextlib.contextmanager
def guarded_output():
    """sys.stdout and sys.stderr as GuardedStreams for the block, the streams themselves again
    afterwards.
    """
    # a descriptor closed at start (2>&-) would be reused by the next file opened, a checkpoint say
    for fd in (1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_WRONLY)  # the lowest free descriptor: this one
    saved = sys.stdout, sys.stderr
    # A stream closed before the start (2>&-) was the user's choice: its text is discarded, and the
    # work goes on.
    out, err = (s if writable(s) else open(os.devnull, "w") for s in saved)  # noqa: SIM115
    sys.stdout, sys.stderr = GuardedStream(out), GuardedStream(err, stops=False)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved

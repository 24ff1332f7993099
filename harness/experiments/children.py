"""The train.py processes of an experiment (compare.py, sweep.py): started one or several at a time,
each stop signal (Ctrl-C, SIGTERM, SIGHUP) passed on to every one running, and what a second signal
does to them."""

import contextlib
import signal
import subprocess
import time

from harness.stopping import LOST_OUTPUT, Aborted, StopFlag

# train.py's exit codes after a stop (129, 130, 141, 143)
STOPPED_CODES = {128 + sig for sig in (*StopFlag.SIGNALS, LOST_OUTPUT)}
POLL_S = 0.1  # how often the ends of several children are looked for


@contextlib.contextmanager
def blocked(signum: int):
    """The signal held pending (not lost) in this thread for the block, and in the processes it
    starts meanwhile.
    """
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signum})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class Children:
    """Runs train.py processes and passes every stop signal (Ctrl-C, SIGTERM, SIGHUP) on to each one
    running.

    Each child runs in a process group of its own, so a terminal's Ctrl-C reaches it once, through
    this process (harness/stopping.py's StopFlag, as in train.py): the child stops at its next safe
    point and saves a checkpoint, and this process waits for that. A second Ctrl-C reaches the
    children too, which abort at once; so does this process, once they have ended.
    """

    def __init__(self):
        self.running: list[subprocess.Popen] = []
        self.told: set[subprocess.Popen] = set()  # the children passed a signal already
        self.flag = StopFlag(on_signal=self.pass_on)

    @property
    def signum(self) -> int | None:
        # lost output: the child sees it in its own writes
        return self.flag.signum if self.flag.signum != LOST_OUTPUT else None

    def __enter__(self):
        self.flag.__enter__()
        return self

    def pass_on(self, signum: int) -> None:
        for child in list(self.running):
            if child.poll() is None:
                child.send_signal(signum)
                self.told.add(child)

    def start(self, command: list[str], output=None) -> subprocess.Popen | None:
        """Start the command (its output to `output`, an open file, or this process's); None if a
        stop was asked for already.

        The child starts with SIGINT blocked (it inherits this process's mask): a Ctrl-C passed on
        while its interpreter starts then waits until train.py can answer it in one line
        (harness/stopping.py's exit_on_signal unblocks it), where Python would stop with "Fatal
        Python error: init_import_site". Only SIGINT: the one Python turns into an exception while
        it starts; SIGTERM and SIGHUP end a starting child quietly, and a child of another kind
        keeps them.
        """
        # here too: a Ctrl-C meanwhile is handled once the child exists, and passed on
        with blocked(signal.SIGINT):
            if self.signum is not None:
                return None
            child = subprocess.Popen(
                command,
                process_group=0,
                stdout=output,
                stderr=subprocess.STDOUT if output else None,
            )
            self.running.append(child)
        # SIGTERM or SIGHUP while the child was being started
        if self.signum is not None and child not in self.told:
            child.send_signal(self.signum)
            self.told.add(child)
        return child

    def wait(self) -> tuple[subprocess.Popen, int]:
        """Wait until one of the running children ends: (that child, its exit code)."""
        if not self.running:
            raise ValueError("no child is running")
        try:
            while True:
                if len(self.running) == 1:
                    self.running[0].wait()
                ended = next((child for child in self.running if child.poll() is not None), None)
                if ended is not None:
                    self.running.remove(ended)
                    self.told.discard(ended)
                    return ended, ended.returncode
                time.sleep(POLL_S)
        # a second signal: the children got it too and abort; wait for them, briefly
        except Aborted:
            for child in self.running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=5)
                child.kill()
            raise

    def run(self, command: list[str]) -> int:
        """Start the command and wait for it to end; its exit code (not started if a stop was asked
        for already).
        """
        child = self.start(command)
        if child is None:
            return 128 + self.signum
        while True:
            ended, code = self.wait()
            if ended is child:
                return code

    def __exit__(self, *exc) -> None:
        self.flag.__exit__(*exc)

"""An experiment's train.py processes, each stop signal (Ctrl-C, SIGTERM, SIGHUP) passed on to
every one running."""

import contextlib
import signal
import subprocess
import time

from harness.stopping import LOST_OUTPUT, Aborted, StopFlag

# train.py's exit codes after a stop (129, 130, 141, 143)
STOPPED_CODES = {128 + sig for sig in (*StopFlag.SIGNALS, LOST_OUTPUT)}
POLL_S = 0.1  # how often the ends of several children are looked for


class Children:
    """train.py processes, each in a process group of its own, so that a terminal's Ctrl-C reaches
    it once, through this process. A second Ctrl-C aborts them at once, then this one."""

    def __init__(self):
        self.running: list[subprocess.Popen] = []
        self.told: set[subprocess.Popen] = set()  # the children passed a signal already
        self.flag = StopFlag(on_signal=self.pass_on)

    @property
    def signum(self) -> int | None:
        # lost output: the child sees it in its own writes
        return None if self.flag.signum == LOST_OUTPUT else self.flag.signum

    def __enter__(self):
        self.flag.__enter__()
        return self

    def pass_on(self, signum: int) -> None:
        for child in list(self.running):
            if child.poll() is None:
                child.send_signal(signum)
                self.told.add(child)

    def start(self, command: list[str], output=None) -> subprocess.Popen | None:
        """Start the command, its output to `output` (an open file) or ours; None after a stop. The
        child starts with SIGINT blocked (exit_on_signal unblocks it): a Ctrl-C while its
        interpreter starts is then one line, not "Fatal Python error"."""
        # here too: a Ctrl-C meanwhile is handled once the child exists, and passed on
        before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            if self.signum is not None:
                return None
            stderr = subprocess.STDOUT if output else None
            child = subprocess.Popen(command, process_group=0, stdout=output, stderr=stderr)
            self.running.append(child)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)
        # SIGTERM or SIGHUP while the child was being started
        if self.signum is not None and child not in self.told:
            child.send_signal(self.signum)
            self.told.add(child)
        return child

    def wait(self) -> tuple[subprocess.Popen, int]:
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
        """Run the command, the only one running: its exit code (128 + the signal after a stop)."""
        if self.start(command) is None:
            return 128 + self.signum
        return self.wait()[1]

    def __exit__(self, *exc) -> None:
        self.flag.__exit__(*exc)

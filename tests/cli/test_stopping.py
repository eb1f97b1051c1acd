"""The signals that end a follower are taken where no lock is held (``cli.stopping``): a
handler that raised in the middle of a ``with lock`` left the lock held, and ``podcache watch``
into a pipe hung on SIGTERM."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from podcache.cli.stopping import StopSignals


def _raising(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_inside_a_locked_block_is_taken_after_it(signum: int) -> None:
    lock = threading.Lock()
    previous = signal.signal(signum, _raising)
    try:
        with StopSignals() as stop:
            with lock:
                os.kill(os.getpid(), signum)  # delivered here, in the main thread
                for _ in range(1000):  # bytecodes run: a raising handler would have raised
                    pass
                assert stop.requested == signum
            assert not lock.locked()
            with pytest.raises(KeyboardInterrupt):
                stop.check()
        assert signal.getsignal(signum) is _raising  # restored
    finally:
        signal.signal(signum, previous)


def test_a_signal_left_to_the_system_is_left_alone() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with StopSignals() as stop:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            stop.check()  # ignored: nothing requested
            assert stop.requested is None
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_without_a_signal_check_returns() -> None:
    with StopSignals() as stop:
        stop.check()
    assert stop.requested is None

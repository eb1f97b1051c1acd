"""``serve.failures``: every error class podcache raises has one answer, by its class alone.

The expected answers are written out here, class by class, apart from the table: a class added
to ``podcache.errors`` fails ``test_every_error_class_is_expected`` until it is given one, and
the answer cannot depend on the order in which handlers catch or the table lists.
"""

from __future__ import annotations

import inspect

import pytest

from podcache import errors
from podcache.procs import ProcFormatError
from podcache.serve import failures
from podcache.serve.failures import FAILURES, failure_of
from podcache.serve.response import HTTPError

RUNTIME = (503, "runtime", True)
UNREADABLE = (503, "cannot read", True)
NO_PROCESS = (404, "no", False)

EXPECTED: dict[type[BaseException], tuple[int, str, bool]] = {
    errors.PodcacheError: RUNTIME,
    errors.CRIError: RUNTIME,
    errors.RuntimeUnavailableError: RUNTIME,
    errors.RuntimeDeadlineError: RUNTIME,  # a TimeoutError too: the same answer either way
    errors.RuntimeProtocolError: RUNTIME,
    errors.EventsUnsupportedError: RUNTIME,
    errors.EndpointNotFoundError: RUNTIME,
    errors.ResyncRequiredError: RUNTIME,
    errors.MalformedListingError: RUNTIME,  # a ValueError too
    errors.AmbiguousContainerIDError: RUNTIME,  # a LookupError too
    errors.TokenFileError: RUNTIME,
    errors.ServeError: RUNTIME,
    ProcFormatError: UNREADABLE,  # a PodcacheError and a ValueError: its own answer wins
    TimeoutError: RUNTIME,  # an OSError: not "cannot read"
    ProcessLookupError: NO_PROCESS,  # an OSError: not "cannot read"
    PermissionError: UNREADABLE,
    FileNotFoundError: UNREADABLE,
    OSError: UNREADABLE,
}
"""Class -> (status, what the message says, Retry-After)."""


def _sample(kind: type[BaseException]) -> BaseException:
    """An instance of ``kind`` with a message (constructors differ in their arguments)."""
    made: dict[type[BaseException], BaseException] = {
        errors.EndpointNotFoundError: errors.EndpointNotFoundError(["/run/x.sock"]),
        errors.ResyncRequiredError: errors.ResyncRequiredError(1, 2, 3, "too old"),
        errors.AmbiguousContainerIDError: errors.AmbiguousContainerIDError("ab", ["abc", "abd"]),
    }
    if kind in made:
        return made[kind]
    if issubclass(kind, errors.CRIError):
        return kind("unix:///run/x.sock", "runtime unavailable")
    return kind("runtime unavailable")


def _answer(kind: type[BaseException]) -> HTTPError:
    error = _sample(kind)
    return failure_of(kind).http_error(error, subject="process 7", proc_root="/host/proc")


def test_every_error_class_is_expected() -> None:
    """Each class of ``podcache.errors`` (and ``ProcFormatError``) has an expected answer here."""
    defined = {
        value
        for value in vars(errors).values()
        if inspect.isclass(value) and issubclass(value, BaseException)
    }
    assert defined - set(EXPECTED) == set()
    assert ProcFormatError in EXPECTED


@pytest.mark.parametrize("kind", list(EXPECTED), ids=lambda kind: kind.__name__)
def test_each_class_gets_its_answer(kind: type[BaseException]) -> None:
    status, words, retry = EXPECTED[kind]
    answer = _answer(kind)
    assert answer.status == status
    assert (("retry-after", "1") in answer.headers) is retry
    if words == "runtime":
        assert answer.message == str(_sample(kind))  # the error's own words, nothing added
    else:
        assert answer.message.startswith(f"{words} process 7")


def test_the_order_of_the_table_carries_no_meaning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read in reverse (bases before the classes below them), the table answers the same."""
    forward = {kind: _answer(kind).body() for kind in EXPECTED}
    monkeypatch.setattr(failures, "FAILURES", dict(reversed(FAILURES.items())))
    assert {kind: _answer(kind).body() for kind in EXPECTED} == forward


def test_a_miss_names_its_reason_and_the_proc_root() -> None:
    answer = _answer(ProcessLookupError)
    assert answer.message == "no process 7 (in /host/proc)"
    assert answer.extra == {"reason": "no_process"}


def test_an_error_without_words_says_how_long_the_runtime_was_waited_for() -> None:
    failure = failure_of(TimeoutError)
    assert failure.http_error(TimeoutError(), wait=10.0).message == (
        "the container runtime did not answer within 10 s"
    )
    assert failure.http_error(TimeoutError()).message == "the container runtime did not answer"


@pytest.mark.parametrize("kind", [ValueError, KeyError, RuntimeError, Exception])
def test_a_class_the_table_does_not_answer_is_a_lookup_error(kind: type[Exception]) -> None:
    """Handlers catch only what the table answers; anything else is theirs to let through."""
    with pytest.raises(LookupError, match=kind.__qualname__):
        failure_of(kind)

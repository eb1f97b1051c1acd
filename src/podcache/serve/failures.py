"""What the API answers for an exception: one table from exception class to HTTP status, read
along the exception's MRO (docs/architecture.md §5, item 4).

``RuntimeDeadlineError`` is a ``CRIError`` before it is a ``TimeoutError``, and both say the
runtime did not answer. A class with no entry along its MRO is no failure of this table: the
handler lets it through (logged, and a 500). Each handler states which exceptions it turns
into answers with one ``except`` tuple (a set, not an order); this table says how.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from podcache.errors import PodcacheError
from podcache.jsonview import PID_MISS_REASONS
from podcache.procs import ProcFormatError
from podcache.serve.response import HTTPError

__all__ = ["FAILURES", "RETRY", "Failure", "failure_of"]

RETRY: Final = ("retry-after", "1")
"""The header of every answer a client may retry: in a second (the runtime or ``/proc`` may
answer by then)."""


@dataclass(frozen=True, slots=True)
class Failure:
    """How one kind of exception is answered.

    ``reason`` is the message, a template of ``{subject}`` (what was asked about: "process 5"),
    ``{proc_root}`` and ``{error}`` (the exception's text, or ``silent`` formatted with
    ``{within}`` when it has none); ``retry`` adds ``Retry-After``; ``miss`` is the
    ``PID_MISS_REASONS`` key given as the body's ``"reason"``, when the answer is a miss.
    """

    status: int
    reason: str
    retry: bool
    miss: str | None = None
    silent: str = ""

    def http_error(
        self,
        exc: BaseException,
        *,
        subject: str = "a process",
        proc_root: str = "",
        wait: float | None = None,
    ) -> HTTPError:
        """``exc`` answered by this entry; ``wait`` is how long the caller waited for the
        runtime (an error with no text says so)."""
        within = "" if wait is None else f" within {wait:g} s"
        error = str(exc) or self.silent.format(within=within)
        message = self.reason.format(subject=subject, proc_root=proc_root, error=error)
        extra = None if self.miss is None else {"reason": PID_MISS_REASONS[self.miss]}
        return HTTPError(self.status, message, headers=[RETRY] if self.retry else None, extra=extra)


_RUNTIME = Failure(
    503, "{error}", retry=True, silent="the container runtime did not answer{within}"
)
_UNREADABLE = Failure(503, "cannot read {subject}: {error}", retry=True)

FAILURES: Final[dict[type[BaseException], Failure]] = {
    PodcacheError: _RUNTIME,
    TimeoutError: _RUNTIME,
    ProcFormatError: _UNREADABLE,
    ProcessLookupError: Failure(
        404, "no {subject} (in {proc_root})", retry=False, miss="no_process"
    ),
    OSError: _UNREADABLE,
}
"""Exception class -> its answer. The order of the entries carries no meaning (``failure_of``
walks the exception's MRO); a class needs an entry when it must be answered apart from its
bases."""


def failure_of(kind: type[BaseException]) -> Failure:
    """The entry of the first class in ``kind``'s MRO that ``FAILURES`` lists; LookupError when
    none is (a handler catches only what the table answers: that is a bug, answered 500)."""
    for cls in kind.__mro__:
        failure = FAILURES.get(cls)
        if failure is not None:
            return failure
    raise LookupError(f"serve.failures.FAILURES has no answer for {kind.__qualname__}")

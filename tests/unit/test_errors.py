"""Every error podcache raises on purpose is in the ``PodcacheError`` tree ``errors.py`` draws.

The tests walk every podcache module for the exception classes it defines, check that each is
a PodcacheError (but for the few control-flow exceptions named below, with their reason),
that the tree drawn in ``errors.py``'s docstring is the tree the classes form, and that each
keeps the built-in base a caller catches without knowing podcache.
"""

from __future__ import annotations

import importlib
import pickle
import pkgutil
import re

import pytest

import podcache
from podcache import errors, model, procs
from podcache.cri import convert
from podcache.errors import PodcacheError
from podcache.serve import auth, server

NOT_ERRORS = {
    "podcache.serve.http1.parsing._Stop": "ends parsing a request on purpose; never leaves http1",
    "podcache.serve.http1.states.UnlistedTransitionError": "a bug in a connection's state "
    "machine (an AssertionError); never leaves http1: the connection is reset",
    "podcache.cri._wire.MalformedError": "the C reader's own; convert.py raises it as a "
    "MalformedListingError at the boundary",
    "podcache.cri.eventwire.EventWireError": "the event reader's own; eventstream raises it "
    "as a RuntimeProtocolError naming the endpoint",
    "podcache.cri.h2core.CallFailedError": "the HTTP/2 client's status of a failed call; the "
    "caller maps it (failures) to the CRIError of that status, naming the endpoint",
    "podcache.cri.h2core.WireViolationError": "a CallFailedError; mapped to a "
    "RuntimeProtocolError naming the endpoint",
    "podcache.cri.caller._NotStreamedError": "a streaming list call's UNIMPLEMENTED; never "
    "leaves the caller, which makes the unary call instead",
    "podcache.cri.liststream.ListStreamTooLongError": "a streamed listing past its bound; the "
    "caller raises it as a CRIError naming the method and the endpoint",
    "podcache.cri.oneshot._UnexpectedAnswerError": "the one-shot reader's own; never leaves "
    "oneshot: CRIRuntime reads again and raises its own error",
    "podcache.cri.oneshot._NotYet": "wait_answers' wait ran out; never leaves the connection's "
    "wait_answers, which answers False",
    "podcache.cri.wire.headers.HPACKError": "a header block either HTTP/2 driver cannot "
    "decode; oneshot reads again with CRIRuntime, http2 raises it as a WireViolationError",
    "podcache.cri.wire.frames.FrameError": "a frame whose fields contradict its length; "
    "oneshot reads again with CRIRuntime, http2 raises it as a WireViolationError",
    "podcache.cri.wire.protobuf.ProtobufError": "bytes that are not the message read; never "
    "leaves oneshot: CRIRuntime reads again and raises its own error",
    "podcache.serve.crisock.forward.UpstreamError": "a forwarded call's gRPC status; the CRI "
    "socket answers its client with that status, it never reaches Python callers",
    "podcache.serve.crisock.server._FailureError": "the status a CRI socket call answers with; "
    "never leaves the server",
    "podcache.serve.eventhub.SubscribersFullError": "the event hub's refusal of one more "
    "subscriber; the CRI socket answers its client RESOURCE_EXHAUSTED with its message",
    "podcache.serve.crisock.forward._QueueFullError": "the queue for an upstream slot is full; "
    "never leaves the forwarder, which raises an UpstreamError (RESOURCE_EXHAUSTED)",
}
"""Exception classes outside the tree, and why."""

_SKIPPED_MODULES = ("__main__",)  # running it runs the command


def _modules() -> list[str]:
    return [
        info.name
        for info in pkgutil.walk_packages(podcache.__path__, "podcache.")
        if info.name.rsplit(".", 1)[-1] not in _SKIPPED_MODULES
    ]


def _exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class a podcache module defines, by qualified name."""
    found: dict[str, type[BaseException]] = {}
    for name in _modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == name
            ):
                found[f"{name}.{value.__qualname__}"] = value
    return found


def test_the_walk_finds_the_errors_it_must() -> None:
    found = {cls.__name__ for cls in _exception_classes().values()}
    assert {"MalformedListingError", "AmbiguousContainerIDError", "CLIError", "HTTPError"} <= found


def test_every_exception_podcache_defines_is_a_podcache_error() -> None:
    outside = [
        name
        for name, cls in _exception_classes().items()
        if name not in NOT_ERRORS and not issubclass(cls, PodcacheError)
    ]
    assert outside == [], "not in the PodcacheError tree (errors.py) and not in NOT_ERRORS"


_NAME = re.compile(r"[A-Z][A-Za-z]*Error")


def _drawn_tree() -> dict[str, str | None]:
    """The tree in errors.py's docstring (the block after ``::``): each class name -> its
    drawn parent's, the parent being the nearest line above whose name starts further left."""
    block = (errors.__doc__ or "").split("::\n\n", 1)[1].split("\n\n", 1)[0]
    parents: dict[str, str | None] = {}
    above: list[tuple[int, str]] = []  # (column, name) of the lines that can still be parents
    for line in block.splitlines():
        match = _NAME.search(line)
        assert match is not None, f"no class name in the drawn line {line!r}"
        while above and above[-1][0] >= match.start():
            above.pop()
        parents[match.group()] = above[-1][1] if above else None
        above.append((match.start(), match.group()))
    return parents


def test_the_drawn_tree_is_the_tree_of_the_classes() -> None:
    drawn = _drawn_tree()
    assert drawn["PodcacheError"] is None
    classes = {
        cls.__name__: cls for cls in _exception_classes().values() if issubclass(cls, PodcacheError)
    }
    assert set(drawn) == set(classes), "errors.py's drawing and the classes differ"
    for name, parent in drawn.items():
        if parent is not None:
            assert classes[parent] in classes[name].__bases__, f"{name} is not under {parent}"


@pytest.mark.parametrize(
    ("error", "built_in"),
    [
        (errors.MalformedListingError, ValueError),
        (errors.AmbiguousContainerIDError, LookupError),
        (errors.TokenFileError, ValueError),
        (procs.ProcFormatError, ValueError),
        (errors.RuntimeDeadlineError, TimeoutError),
    ],
)
def test_errors_keep_their_built_in_base(
    error: type[PodcacheError], built_in: type[Exception]
) -> None:
    assert issubclass(error, built_in)
    assert issubclass(error, PodcacheError)


def test_the_old_import_paths_still_work() -> None:
    ambiguous = errors.AmbiguousContainerIDError
    assert podcache.AmbiguousContainerIDError is model.AmbiguousContainerIDError is ambiguous
    assert convert.MalformedListingError is errors.MalformedListingError
    assert auth.TokenFileError is errors.TokenFileError
    assert server.ServeError is errors.ServeError


def test_an_ambiguous_prefix_error_survives_pickling() -> None:
    error = errors.AmbiguousContainerIDError("3f2a", ["3f2a01", "3f2a02"])
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.prefix, copy.matches, str(copy)) == (error.prefix, error.matches, str(error))

"""``podcache.cli.logs``: ``--log-level`` sends the ``podcache`` loggers' records at that level and
above to stderr as ``podcache: warning: ...``; while ``watch``'s screen is up they are held (the
last ``HELD_MAX``), the newest readable for its last line, and written out when it closes."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from podcache.cli.logs import HELD_MAX, held, install, log_level_option, newest_held


@click.command()
@log_level_option
def speak() -> None:
    install()  # as follow.listing does when a command starts following
    log = logging.getLogger("podcache.cache")
    log.debug("quiet detail")
    log.warning("GetContainerEvents at unix:///x: stream lost")
    with held():
        for n in range(HELD_MAX + 5):
            log.warning("held %d", n)
        click.echo(f"newest: {newest_held()}")
    log.error("after")


@pytest.fixture(autouse=True)
def restore_level() -> Iterator[None]:
    logger = logging.getLogger("podcache")
    level = logger.level
    yield None
    logger.setLevel(level)


def test_warning_by_default_as_the_cli_writes_its_own_errors() -> None:
    result = CliRunner().invoke(speak, [])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == "podcache: warning: GetContainerEvents at unix:///x: stream lost"
    assert "quiet detail" not in result.stderr
    assert f"newest: podcache: warning: held {HELD_MAX + 4}" in result.stdout
    held_lines = [line for line in lines if " held " in line]
    assert len(held_lines) == HELD_MAX  # the oldest dropped first
    assert held_lines[0].endswith("held 5") and held_lines[-1].endswith(f"held {HELD_MAX + 4}")
    assert lines[-1] == "podcache: error: after"


def test_debug_shows_more_and_error_less() -> None:
    debug = CliRunner().invoke(speak, ["--log-level", "DEBUG"])
    assert "podcache: debug: quiet detail" in debug.stderr
    error = CliRunner().invoke(speak, ["--log-level", "error"])
    assert error.stderr.splitlines() == ["podcache: error: after"]
    bad = CliRunner().invoke(speak, ["--log-level", "loud"])
    assert bad.exit_code == 2 and "--log-level" in bad.stderr

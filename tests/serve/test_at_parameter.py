"""``?at=``: every RFC 3339 time in UTC years 1-9999 is read as
``datetime`` reads it, whether its ``+`` arrived encoded or as the space an unencoded one
decodes to; a leap second is the next second; anything else, times outside those years
included, is a 400 naming ``at`` with examples that work, never an exception of another kind.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podcache.serve.query import AT_EXAMPLES, parse_at, parse_query
from podcache.serve.response import HTTPError
from podcache.serve.who import rfc3339

OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
MOMENTS = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=OFFSETS
).map(lambda moment: moment.replace(microsecond=0))


def query_at(raw: str) -> float:
    """``raw`` as it arrives unencoded in ``?at=``: decoded by the query parser, then read."""
    return parse_at(parse_query(f"at={raw}", frozenset({"at"}), frozenset())["at"][0])


@given(MOMENTS)
def test_every_rfc3339_time_reads_as_its_unix_seconds(moment: datetime) -> None:
    assert parse_at(moment.isoformat()) == moment.timestamp()


@given(MOMENTS)
def test_an_unencoded_plus_in_the_offset_reads_as_plus(moment: datetime) -> None:
    text = moment.isoformat()
    assert query_at(text) == moment.timestamp()  # "+05:30" arrives as " 05:30"
    assert query_at(text.replace("+", "%2B")) == moment.timestamp()
    assert query_at(text.replace("T", " ", 1)) == moment.timestamp()  # both spaces


def test_the_issues_unencoded_time_is_read() -> None:
    assert (
        query_at("2026-12-03T12:36:50+00:00")
        == datetime(2026, 12, 3, 12, 36, 50, tzinfo=UTC).timestamp()
    )


@pytest.mark.parametrize(
    "text",
    [
        "9999-12-31T23:59:59-01:00",  # 10000-01-01 in UTC
        "0001-01-01T00:00:00+01:00",  # year 0 in UTC
        "9999-12-31T23:59:60Z",  # the leap second would be year 10000
        "0000-01-01T00:00:00Z",
    ],
)
def test_times_outside_utc_years_1_to_9999_are_a_400_naming_at(text: str) -> None:
    with pytest.raises(HTTPError) as caught:
        parse_at(text)
    assert caught.value.status == 400
    assert str(caught.value).startswith("at ")
    assert AT_EXAMPLES[0] in str(caught.value)


def test_a_leap_second_is_the_next_second() -> None:
    assert parse_at("2016-12-31T23:59:60Z") == parse_at("2017-01-01T00:00:00Z")
    assert parse_at("2016-12-31T23:59:60.5Z") == parse_at("2017-01-01T00:00:00.5Z")
    assert parse_at("2017-01-01T00:59:60+01:00") == parse_at("2017-01-01T00:00:00Z")
    assert parse_at("2015-06-30T23:59:60Z") == parse_at("2015-07-01T00:00:00Z")


@pytest.mark.parametrize("text", ["2016-12-31T12:59:60Z", "2016-12-30T23:59:60Z"])
def test_a_second_60_where_no_leap_second_can_be_is_a_400_saying_why(text: str) -> None:
    with pytest.raises(HTTPError, match="leap second") as caught:
        parse_at(text)
    assert caught.value.status == 400


def test_every_example_in_the_message_works() -> None:
    for example in AT_EXAMPLES:
        assert query_at(example) > 0


@settings(max_examples=500)
@given(
    st.one_of(
        st.text(max_size=40),
        st.from_regex(
            r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
            r"([Zz]|[-+ ][0-9]{2}:[0-9]{2})\Z"
        ),
        st.from_regex(r"\A[0-9]{1,11}(\.[0-9]{1,9})?\Z"),
    )
)
def test_any_value_is_seconds_the_answer_can_write_or_a_400_naming_at(text: str) -> None:
    try:
        seconds = parse_at(text)
    except HTTPError as error:
        assert error.status == 400
        assert str(error).startswith("at ")
        assert all(example in str(error) for example in AT_EXAMPLES)
    else:
        assert rfc3339(seconds).endswith("Z")  # the 404 and departed_at format it

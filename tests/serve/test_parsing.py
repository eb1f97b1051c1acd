"""Table-driven tests of the serve parsers: durations, listen addresses, label selectors, ETags,
token files, and the command's usage errors (through click's runner, no server started).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from podcache.jsonview import pod_to_json
from podcache.model import Container, ContainerID, Pod
from podcache.serve import openapi
from podcache.serve.auth import BearerAuth, TokenFileError, read_token_file
from podcache.serve.command import parse_duration, parse_size, serve_command
from podcache.serve.query import LabelSelector, etag_matches
from podcache.serve.response import HTTPError
from podcache.serve.server import ListenAddress, allowed_hosts, parse_listen
from tests.cli.conftest import DEFAULT_SIM_PODS as CLI_DEFAULT_SIM_PODS


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2s", 2.0),
        ("500ms", 0.5),
        ("1.5", 1.5),
        ("1m", 60.0),
        ("1m30s", 90.0),
        ("1h", 3600.0),
        ("0", 0.0),
        (" 3 ", 3.0),
        (".25s", 0.25),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "2x", "-1s", "2 s", "1s2", "ms", "1e3", "inf", "nan"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "address", "loopback"),
    [
        ("127.0.0.1:10260", ListenAddress("127.0.0.1", 10260), True),
        ("localhost:80", ListenAddress("127.0.0.1", 80), True),
        ("[::1]:10260", ListenAddress("::1", 10260), True),
        ("0.0.0.0:10260", ListenAddress("0.0.0.0", 10260), False),
        ("10.1.2.3:1", ListenAddress("10.1.2.3", 1), False),
        ("[::]:65535", ListenAddress("::", 65535), False),
        ("unix:/run/podcache.sock", ListenAddress(path="/run/podcache.sock"), True),
        ("unix:///run/podcache.sock", ListenAddress(path="/run/podcache.sock"), True),
    ],
)
def test_listen_addresses(text: str, address: ListenAddress, loopback: bool) -> None:
    parsed = parse_listen(text)
    assert parsed == address
    assert parsed.loopback is loopback


@pytest.mark.parametrize(
    "text",
    ["10260", ":10260", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", "host.example:80",
     "::1:80", "127.0.0.1:http", "unix:"],
)  # fmt: skip
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_listen(text)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("app=web", "app", "web"),
        ("app==web", "app", "web"),
        ("app", "app", None),
        ("app=", "app", ""),
        ("app.kubernetes.io/name=web", "app.kubernetes.io/name", "web"),
        ("a_b.c-d=x_y.z-1", "a_b.c-d", "x_y.z-1"),
    ],
)
def test_label_selectors(text: str, key: str, value: str | None) -> None:
    selector = LabelSelector.parse(text)
    assert (selector.key, selector.value) == (key, value)


@pytest.mark.parametrize(
    "text", ["", "=web", "-app=x", "app=-x", "a b=c", "Upper.Prefix/x=y", "/x=y", "a/b/c=d"]
)
def test_bad_label_selectors(text: str) -> None:
    with pytest.raises(HTTPError) as info:
        LabelSelector.parse(text)
    assert info.value.status == 400


def test_label_selector_matching() -> None:
    labels = (("app", "web"), ("tier", ""))
    assert LabelSelector.parse("app=web").matches(labels)
    assert not LabelSelector.parse("app=api").matches(labels)
    assert LabelSelector.parse("tier").matches(labels)
    assert LabelSelector.parse("tier=").matches(labels)
    assert not LabelSelector.parse("zone").matches(labels)


@pytest.mark.parametrize(
    ("header", "matches"),
    [
        ('W/"abc"', True),
        ('"abc"', True),
        ('"x", W/"abc"', True),
        ("*", True),
        ('"abcd"', False),
        ("", False),
        ('W/"ab"', False),
    ],
)
def test_etag_matching_is_weak(header: str, matches: bool) -> None:
    assert etag_matches(header, 'W/"abc"') is matches


def test_token_files(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_text("  0123456789abcdef0123\n")
    good.chmod(0o600)
    assert read_token_file(str(good)) == (b"0123456789abcdef0123", None)
    good.chmod(0o644)
    assert "group or others" in str(read_token_file(str(good))[1])
    for content, words in [
        ("", "empty"),
        ("short", "shorter than"),
        ("0123456789 abcdef0123", "whitespace"),
        ("x" * 5000, "larger than"),
    ]:
        bad = tmp_path / "bad"
        bad.write_text(content)
        with pytest.raises(TokenFileError, match=words):
            read_token_file(str(bad))
    with pytest.raises(TokenFileError, match="cannot read"):
        read_token_file(str(tmp_path / "missing"))


def test_bearer_auth_rejects_an_empty_token() -> None:
    with pytest.raises(ValueError, match="empty"):
        BearerAuth(b"")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("1", 1),
        ("4096", 4096),
        ("256MiB", 256 * 1024**2),
        ("64Mi", 64 * 1024**2),
        ("1GiB", 1024**3),
        ("2KiB", 2048),
        ("100MB", 100_000_000),
        ("5 KB", 5000),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "MiB", "-1", "1.5MiB", "1 TiB", "10mb", "0x10"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--cache-period", "soon"], "'soon'"),
        (["--cache-period", "-2s"], "'-2s'"),
        (["--timeout", "0"], "'0'"),
        (["--idle-timeout", "0"], "'0'"),
        (["--idle-timeout", "forever"], "'forever'"),
        (["--max-connections", "0"], "0"),
        (["--max-buffered", "0"], "'0'"),
        (["--max-buffered", "lots"], "'lots'"),
        (["--max-buffered", "1.5GiB"], "'1.5GiB'"),
        (["--listen", "example.com:80"], "example.com:80"),
        (["--listen", "0.0.0.0:10260"], "--token-file"),
        (["--listen", "[::]:10260"], "--token-file"),
        (["--sim", "-r", "unix:///x.sock"], "not both"),
        (["-r", "x"], "malformed runtime endpoint 'x'"),
        (["-r", "unix://relative/cri.sock"], "is relative"),
        (["--token-file", "/nonexistent/token"], "cannot read"),
    ],
)
def test_usage_errors_exit_2_naming_the_value(args: list[str], words: str) -> None:
    result = CliRunner().invoke(serve_command, args, env={"CONTAINER_RUNTIME_ENDPOINT": ""})
    assert result.exit_code == 2, result.output
    assert words in result.output


def test_the_openapi_pod_schemas_match_the_json_shape() -> None:
    schemas = openapi.document(auth=False, version="0")["components"]["schemas"]
    sample = pod_to_json(
        Pod(
            id="u",
            containers=[Container(id=ContainerID("containerd", "a"))],
            labels={"a": "b"},
        )
    )
    assert set(schemas["Pod"]["properties"]) == set(sample)
    assert set(schemas["Container"]["properties"]) == set(sample["containers"][0])


@pytest.mark.parametrize(
    ("listen", "names", "token", "expected"),
    [
        ("unix:/run/p.sock", [], False, None),
        ("127.0.0.1:8080", [], True, None),
        (
            "127.0.0.1:8080",
            [],
            False,
            {"localhost", "127.0.0.1", "[::1]"}
            | {"localhost:8080", "127.0.0.1:8080", "[::1]:8080"},
        ),
        (
            "[::1]:9",
            ["Pod.Local", " "],
            False,
            {"localhost", "127.0.0.1", "[::1]", "pod.local"}
            | {"localhost:9", "127.0.0.1:9", "[::1]:9", "pod.local:9"},
        ),
        (
            "127.0.0.2:80",
            [],
            False,
            {"localhost", "127.0.0.1", "[::1]", "127.0.0.2"}
            | {"localhost:80", "127.0.0.1:80", "[::1]:80", "127.0.0.2:80"},
        ),
    ],
)
def test_allowed_hosts(
    listen: str, names: list[str], token: bool, expected: set[str] | None
) -> None:
    hosts = allowed_hosts(parse_listen(listen), names, token=token)
    assert hosts == (None if expected is None else frozenset(expected))


def test_serve_starts_as_many_simulated_pods_as_the_other_commands() -> None:
    # One default for --sim-pods (README: 12), whichever command starts the simulated runtime.
    option = next(param for param in serve_command.params if param.name == "sim_pods")
    assert option.default == CLI_DEFAULT_SIM_PODS
    help_text = CliRunner().invoke(serve_command, ["--help"], terminal_width=200).output
    assert f"[default: {CLI_DEFAULT_SIM_PODS};" in help_text.split("--sim-pods", 1)[1]

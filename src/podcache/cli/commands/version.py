"""``podcache version``: podcache's version and decoders, then the runtime's Version answer; the
command only."""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

import click

from podcache.cli.options import OutputOptions, RuntimeSettings, output_options, runtime_options

__all__ = ["version_command"]

_LABELS = {
    "podcache_version": "PodcacheVersion",
    "decoder": "Decoder",
    "event_decoder": "EventDecoder",
    "endpoint": "Endpoint",
    "version": "Version",
    "runtime_name": "RuntimeName",
    "runtime_version": "RuntimeVersion",
    "runtime_api_version": "RuntimeApiVersion",
}
_WIDTH = max(len(label) for label in _LABELS.values()) + 2


@click.command("version", short_help="Show podcache's and the runtime's versions.")
@output_options(quiet=False, formats=("table", "json", "yaml"))
@runtime_options
def version_command(*, out: OutputOptions, runtime: RuntimeSettings) -> None:
    """Show podcache's version, the CRI list decoder it runs (c: the C list reader;
    protobuf: the slower fallback of an install built without a C compiler) and its container
    event decoder (c: the C event reader; python: the fallback), then the runtime's
    endpoint and its Version answer (as crictl version: Version is the CRI version,
    RuntimeName, RuntimeVersion, RuntimeApiVersion).

    podcache's own lines come first, so they are printed even when the runtime cannot be
    reached (the error follows on stderr, exit status 1; with -o json or yaml the document then
    holds podcache's fields only). With --sim, the built-in simulated runtime's.
    """
    from podcache import __version__
    from podcache.cri.eventwire import EVENT_READER

    # podcache.cri.DECODER (convert's) and EVENT_DECODER are "c" exactly when the extension
    # podcache.cri._wire imports; eventwire says which without importing the model.
    decoder = "c" if EVENT_READER == "c" else "protobuf"
    client = {"podcache_version": __version__, "decoder": decoder, "event_decoder": EVENT_READER}
    if out.format not in ("json", "yaml"):
        _print_lines(client)
        _print_lines(_runtime_fields(runtime))
        return
    from podcache.cli.render import print_document

    try:
        fields = {**client, **_runtime_fields(runtime)}
    except Exception:  # the runtime's or the CLI's error, reported by podcache.cli.main
        print_document(client, out.format)
        raise
    print_document(fields, out.format)


def _runtime_fields(runtime: RuntimeSettings) -> dict[str, str]:
    """The endpoint and the runtime's Version answer (errors as the CLI's, exit status 1)."""
    from podcache.cli.source import open_source

    with open_source(runtime, one_shot=True, ips=False) as source:
        answer = source.runtime.version()
        endpoint = source.endpoint
    return {
        "endpoint": endpoint,
        "version": answer.version,
        "runtime_name": answer.runtime_name,
        "runtime_version": answer.runtime_version,
        "runtime_api_version": answer.runtime_api_version,
    }


def _print_lines(fields: dict[str, str]) -> None:
    for key, value in fields.items():
        click.echo(f"{_LABELS[key] + ':':<{_WIDTH}}{value}")

"""``podcache version``: podcache's version and the runtime's Version answer; the command only."""

# ruff: noqa: PLC0415 -- imports inside the command are deliberate: start-up stays fast

from __future__ import annotations

import click

from podcache.cli.options import OutputOptions, RuntimeSettings, output_options, runtime_options

__all__ = ["version_command"]


@click.command("version", short_help="Show podcache's and the runtime's versions.")
@output_options(quiet=False, formats=("table", "json", "yaml"))
@runtime_options
def version_command(*, out: OutputOptions, runtime: RuntimeSettings) -> None:
    """Show podcache's version, the runtime's endpoint, and its Version answer (as crictl
    version: Version is the CRI version, RuntimeName, RuntimeVersion, RuntimeApiVersion).

    With --sim, the built-in simulated runtime's. For podcache's version alone, with no runtime,
    use `podcache --version`.
    """
    from podcache import __version__
    from podcache.cli.render import print_document
    from podcache.cli.source import open_source

    with open_source(runtime) as source:
        answer = source.runtime.version()
        endpoint = source.endpoint
    fields = {
        "podcache_version": __version__,
        "endpoint": endpoint,
        "version": answer.version,
        "runtime_name": answer.runtime_name,
        "runtime_version": answer.runtime_version,
        "runtime_api_version": answer.runtime_api_version,
    }
    if out.format in ("json", "yaml"):
        print_document(fields, out.format)
        return
    labels = {
        "podcache_version": "PodcacheVersion",
        "endpoint": "Endpoint",
        "version": "Version",
        "runtime_name": "RuntimeName",
        "runtime_version": "RuntimeVersion",
        "runtime_api_version": "RuntimeApiVersion",
    }
    width = max(len(label) for label in labels.values()) + 2
    for key, value in fields.items():
        click.echo(f"{labels[key] + ':':<{width}}{value}")

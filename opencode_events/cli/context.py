"""``opencode-events context``: what fills a session's context window, and what it costs.

The ledger itself is ``reports/context.py`` (see its notes and docs/context.md), its table
``output.tables.context_table``; this module only chooses the session, writes the table,
JSON or CSV, and reports notes on stderr.
"""

from __future__ import annotations

import sys

import click

from .io import (
    csv_raw_option,
    db_option,
    no_cache_option,
    pipe_safe,
    refuse_stdout_read,
    report_cache,
    report_output,
)

FORMATS = ("table", "json", "csv")


@click.command()
@click.argument("session", required=False, metavar="[SESSION]")
@db_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    help="table for people (default on a terminal), json or csv.",
)
@click.option(
    "--per-inference", is_flag=True, help="Also show how the context grew, inference by inference."
)
@csv_raw_option
@no_cache_option
@pipe_safe
def context(
    session: str | None,
    db_path: str | None,
    fmt: str | None,
    per_inference: bool,
    csv_raw: bool,
    no_cache: bool,
) -> None:
    """What fills a session's context window, by source, and what each source cost.

    SESSION is a session id or an unambiguous prefix (default: the most recent top-level
    session). Subagents are folded in. Sources: system, user, assistant, tool:<name>,
    mcp:<server>, compaction, other. See docs/context.md for how tokens are attributed.
    """
    from ..output import rows as formats
    from ..reports.context import context_report
    from ..store.open import open_store, select_sessions, store_files

    with open_store(db_path) as store:
        refuse_stdout_read(store_files(store))
        (session_id,) = select_sessions(store, [session] if session else [])[:1]
        report = context_report(store, session_id, cache=report_cache(store, no_cache))
    if report.skipped_rows:
        click.echo(f"warning: {report.skipped_rows} unreadable row(s) skipped", err=True)
    if report.unpriced:
        click.echo(
            f"note: no usable price for {', '.join(report.unpriced)} in OpenCode's config or "
            "models cache; their costs are not split (shown as -)",
            err=True,
        )
    out = report_output()
    fmt = fmt or ("table" if out.isatty() else "json")
    if fmt == "table":
        from ..output.tables import context_table

        context_table(report, out=sys.stdout, per_step=per_inference)
        return
    if fmt == "json":
        out.write(formats.write_json(report.document()))
    elif per_inference:
        out.write(
            formats.write_csv(
                report.inference_rows(),
                ["session_id", "message_id", "prompt_tokens", "source", "tokens", "added", "cost"],
                raw=csv_raw,
            )
        )
    else:
        columns = ["source", "tokens", "share", "cost"]
        out.write(formats.write_csv(report.source_rows(), columns, raw=csv_raw))
    out.flush()

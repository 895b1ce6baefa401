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
    report_format,
    report_format_options,
    report_output,
)


def _names_a_file(argument: str) -> bool:
    """Whether ``context``'s argument is a database rather than a session: an id has no
    ``/`` and no dot (``ses_dd80…``); ``opencode.db``, ``./store`` and an existing path do."""
    import os

    return "/" in argument or "." in argument or os.path.lexists(argument)


@click.command()
@click.argument("session", required=False, metavar="[SESSION|DB]")
@db_option
@report_format_options
@click.option(
    "--per-step",
    "--per-inference",
    "per_inference",
    is_flag=True,
    help="Also show how the context grew, step (model call) by step.",
)
@csv_raw_option
@no_cache_option
@pipe_safe
def context(
    session: str | None,
    db_path: str | None,
    fmt: str | None,
    as_json: bool,
    per_inference: bool,
    csv_raw: bool,
    no_cache: bool,
) -> None:
    """What fills a session's context window, by source, and what each source cost.

    SESSION is a session id or an unambiguous prefix (default: the most recent top-level
    session); a path instead (it has a / or a dot, or names a file) is the database to
    read, as --db. Subagents are folded in. Sources: system, user, assistant,
    tool:<name>, mcp:<server>, compaction, other. See docs/context.md for how tokens are
    attributed.
    """
    from ..output import rows as formats
    from ..reports.context import context_report
    from ..store.open import select_sessions, store_files
    from .exits import echo_error, one_line
    from .io import open_store

    if session is not None and _names_a_file(session):
        if db_path is not None:
            raise click.UsageError(f"{session} is a path and --db names the database already")
        db_path, session = session, None

    with open_store(db_path) as store:
        refuse_stdout_read(store_files(store))
        (session_id,) = select_sessions(store, [session] if session else [])[:1]
        report = context_report(store, session_id, cache=report_cache(store, no_cache))
    # A model id is the store's text: its control characters are shown, never obeyed.
    if report.skipped_rows:
        echo_error(f"warning: {report.skipped_rows} unreadable row(s) skipped")
    if report.unpriced:
        echo_error(
            f"note: no usable price for {one_line(', '.join(report.unpriced))} in OpenCode's "
            "config or models cache; their costs are not split (shown as -)"
        )
    if report.undone_inferences:
        echo_error(
            f"note: a pending /undo undid {report.undone_inferences} step(s), "
            f"${report.undone_cost:.6g}: counted, as OpenCode counts them until the next "
            "prompt deletes them"
        )
    out = report_output()
    fmt = report_format(fmt, as_json, out)
    if fmt == "table":
        from ..output.tables import context_table

        context_table(report, out=sys.stdout, per_step=per_inference)
        return
    if fmt == "json":
        out.write(formats.write_json(report.document()))
        out.flush()
        return
    if per_inference:
        rows = report.inference_rows()
        columns = [
            *("session_id", "message_id", "prompt_tokens", "source", "tokens", "added", "cost"),
            *("compaction", "undone"),
        ]
    else:
        rows, columns = report.source_rows(), ["source", "tokens", "share", "cost"]
    if fmt == "jsonl":
        out.write(formats.write_jsonl(rows))
    elif fmt == "markdown":
        numeric = ["prompt_tokens", "tokens", "added", "share", "cost"]
        out.write(formats.write_markdown(rows, columns, numeric=numeric))
    else:
        out.write(formats.write_csv(rows, columns, raw=csv_raw))
    out.flush()

"""``opencode-events context``: what fills a session's context window, and what it costs.

The ledger itself is ``reports/context.py`` (see its notes and docs/context.md); this module only
chooses the session, writes the table, JSON or CSV, and reports notes on stderr.
"""

from __future__ import annotations

import sys
from typing import Any

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


def _share(value: Any) -> str:
    return f"{value * 100:.1f}%" if isinstance(value, float) else "-"


def _draw(report: Any, per_inference: bool) -> None:
    from ..output.tables import Column, count, draw_table, money

    out = sys.stdout
    if per_inference:
        _draw_inferences(report, out)
    columns = [
        Column("source", lambda r: r["source"], style="cyan"),
        Column("tokens", lambda r: count(r["tokens"]), numeric=True),
        Column("share", lambda r: _share(r["share"]), numeric=True),
        Column("cost", lambda r: money(r["cost"]), numeric=True),
    ]
    total = {
        "source": "total",
        "tokens": report.context_tokens,
        "share": 1.0 if report.context_tokens else None,
        "cost": report.cost,
    }
    subs = f" + {len(report.subagents)} subagent(s)" if report.subagents else ""
    caption = f"tokens: the last prompt · cost: the session{subs} · output: generated"
    if report.unpriced:
        caption += " · -: no price"
    draw_table(
        columns,
        report.source_rows(),
        out=out,
        title=f"Context of {report.session_id}",
        total=total,
        caption=caption,
    )


def _draw_inferences(report: Any, out: Any) -> None:
    from ..output.tables import Column, count, draw_table, money

    previous: dict[str, int] = {}
    rows = []
    for index, i in enumerate(report.inferences, start=1):
        before = previous.get(i.session_id)
        growth = "" if before is None else f"{i.prompt_tokens - before:+,}"
        added = sorted(i.added.items(), key=lambda item: (-item[1], item[0]))
        rows.append(
            {
                "n": index,
                "message": i.message_id,
                "session": "" if i.session_id == report.session_id else "sub " + i.session_id,
                "prompt": i.prompt_tokens,
                "growth": growth,
                "added": ", ".join(f"{s} +{t:,}" for s, t in added[:4])
                + (" …" if len(added) > 4 else ""),
                "cost": i.cost,
                "note": "compaction (reset after)" if i.compaction else "",
            }
        )
        previous[i.session_id] = i.prompt_tokens
    columns = [
        Column("#", lambda r: count(r["n"]), numeric=True),
        Column("message", lambda r: r["message"], style="cyan", drop=3),
        Column("session", lambda r: r["session"], max_width=24, drop=2),
        Column("prompt", lambda r: count(r["prompt"]), numeric=True),
        Column("growth", lambda r: r["growth"], numeric=True),
        Column("added", lambda r: r["added"], max_width=60, drop=1),
        Column("cost", lambda r: money(r["cost"]), numeric=True),
        Column("", lambda r: r["note"], drop=4),
    ]
    draw_table(
        columns,
        rows,
        out=out,
        title="Inferences (prompt = input + cache read + cache write)",
        caption="growth: over the previous prompt of the same session; cost: OpenCode's",
    )


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
    from ..store.open import select_sessions, store_files
    from .io import open_store

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
        _draw(report, per_inference)
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

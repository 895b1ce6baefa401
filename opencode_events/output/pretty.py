"""The pretty view: normalized events as lines people read, with a live footer.

This is the only module that uses rich, and it imports rich only when a ``PrettyWriter``
is made, so the JSON Lines path never loads it. ``PrettyWriter`` has the writer interface
of ``writers.JsonlWriter`` (``write``, ``end_batch``, ``flush``). Every event is one line
(what a tool did, to which file or command, ✓/✗, exit code, duration); messages and
reasoning keep their whole text, reasoning dimmed; errors are red, warnings yellow. On a
terminal a footer below the lines shows steps, tool calls, tokens and cost so far (and
the tail of text while it streams, with ``--deltas``); it is redrawn after each input
batch and removed at the end, where the closing metrics event prints the totals.
docs/pretty.md shows the layout.
"""

from __future__ import annotations

import atexit
import math
import os
import sys
from collections.abc import Iterable
from typing import IO, Any, TextIO

import msgspec

from ..core.mapping import event_command_failed, event_failed
from ..events import (
    Attachment,
    Command,
    Compaction,
    Delta,
    Error,
    Event,
    Mention,
    Message,
    Metrics,
    Orchestration,
    Patch,
    Permission,
    Prompt,
    Question,
    Read,
    Reasoning,
    Retry,
    Search,
    Skill,
    Subtask,
    Unknown,
    Usage,
    Warning,
    Write,
)
from .rows import counted, visible

__all__ = ["PrettyWriter", "FullScreen", "format_duration", "format_tokens", "showable"]

OK, FAIL, NEUTRAL = "✓", "✗", "•"
MAX_LINES = 12  # of a message, reasoning or prompt shown; --full shows every line
_LABEL_WIDTH = 11


def format_duration(ms: float | None) -> str | None:
    if ms is None or not 0 <= ms < math.inf:  # NaN too: a normalized input can hold anything
        return None
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m {seconds:02d}s"


def format_tokens(n: int) -> str:
    return f"{n:,}"


def _first_line(text: str | None, limit: int = 200) -> str:
    if not text:
        return ""
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


class _TextOut:
    """A text stream over a binary one, without owning or closing it; a character the
    encoding lacks is written as ``?``, never an error."""

    def __init__(self, out: IO[bytes], encoding: str = "utf-8", errors: str = "replace") -> None:
        self._out = out
        self._encoding = encoding
        self._errors = errors

    def write(self, text: str) -> int:
        self._out.write(text.encode(self._encoding, self._errors))
        return len(text)

    def flush(self) -> None:
        self._out.flush()

    def isatty(self) -> bool:
        isatty = getattr(self._out, "isatty", None)
        return bool(isatty and isatty())

    def fileno(self) -> int:
        return self._out.fileno()

    @property
    def encoding(self) -> str:
        return self._encoding


def _is_utf8(encoding: str) -> bool:
    import codecs

    try:
        return codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        return False


def showable(out: Any) -> Any:
    """``out``, or where its encoding is not UTF-8 (an ASCII or Latin-1 locale) a stream
    over its bytes that writes a character the encoding lacks as a ``?`` for each column
    it takes (a table laid out for wide CJK stays aligned): a title in CJK or an emoji,
    or the board's own ``…``, is never an error."""
    encoding = getattr(out, "encoding", None) or "utf-8"
    if _is_utf8(encoding) or not hasattr(out, "buffer"):
        return out
    import codecs

    try:
        codecs.lookup_error(_CELLS)
    except LookupError:
        codecs.register_error(_CELLS, _cells_replaced)
    out.flush()
    return _TextOut(out.buffer, encoding, _CELLS)


_CELLS = "opencode-events-cells"


def _cells_replaced(exc: UnicodeError) -> tuple[str, int]:
    """A codec error handler: what cannot be encoded, as a ``?`` a terminal column."""
    from rich.cells import cell_len

    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "?" * cell_len(exc.object[exc.start : exc.end]), exc.end


def passes_broken_pipe(console: Any) -> Any:
    """Make a rich ``Console`` raise ``BrokenPipeError`` when its reader goes away, as any
    other output does; rich's default exits with status 1, and the CLI's convention for a
    closed pipe is its own (141, silent)."""

    def reader_gone() -> None:
        console.quiet = True  # nothing more is written, not even the footer's end
        raise BrokenPipeError

    console.on_broken_pipe = reader_gone
    return console


def _outcomes(failed: int, bad_exits: int) -> str:
    """`` (1 failed · 2 bad exits)``: the calls that failed (``tool_failures``) and the
    commands that exited other than 0 or were killed (``command_failures``), both marked ✗;
    empty when there are none."""
    said = [f"{failed} failed"] if failed else []
    if bad_exits:
        said.append(f"{bad_exits} bad exit{'s' if bad_exits > 1 else ''}")
    return f" ({' · '.join(said)})" if said else ""


def _breakdown(input_: int, output: int, reasoning: int, read: int, write: int) -> str:
    """in · out · reasoning · cache read · cache write, each only when not zero (in and out
    always): the same names as the step lines."""
    parts = [f"in {format_tokens(input_)}", f"out {format_tokens(output)}"]
    for name, value in (("reasoning", reasoning), ("cache read", read), ("cache write", write)):
        if value:
            parts.append(f"{name} {format_tokens(value)}")
    return " · ".join(parts)


class _Tally:
    """What the footer shows so far, counted as the closing line counts: steps, tool calls
    (a call of several events, an ``apply_patch`` of four files, is one), failed calls."""

    __slots__ = (
        "steps",
        "calls",
        "failed",
        "bad_exits",
        "subagents",
        "sessions",
        "input",
        "output",
        "reasoning",
        "cache_read",
        "cache_write",
        "total",
        "cost",
    )

    def __init__(self) -> None:
        self.steps = 0
        self.calls: set[Any] = set()
        self.failed: set[Any] = set()
        self.bad_exits: set[Any] = set()  # completed, but the command exited ≠ 0 or was killed
        # Subagent sessions the run started: the stream holds none of their steps, which
        # `run` reads from the store at the end (the closing line's +sub)
        self.subagents: set[Any] = set()
        self.sessions: set[Any] = set()  # whose events came (a subagent's, with --children)
        self.input = self.output = self.reasoning = self.cache_read = self.cache_write = 0
        self.total = 0
        self.cost = 0.0


class PrettyWriter:
    """Events as readable lines on ``out`` (a text or binary stream).

    ``width`` fixes the line width (default: the terminal's, else 80); ``color`` forces
    styles on or off (default: on for a terminal, honouring NO_COLOR); ``live`` forces the
    footer on or off (default: on for a terminal).
    """

    def __init__(
        self,
        out: IO[str] | IO[bytes] | None = None,
        *,
        width: int | None = None,
        color: bool | None = None,
        live: bool | None = None,
        max_lines: int | None = MAX_LINES,
        subagents_at_end: bool = False,
    ) -> None:
        from rich.console import Console

        self._max_lines = max_lines  # of a message's text; None: all of it (--full)
        # The closing metrics will bring the subagents' figures (``run`` reads them from the
        # store): the footer says they come at the end, not that they are missing.
        self._subagents_at_end = subagents_at_end

        if out is None or out is getattr(sys.stdout, "buffer", None):
            out = sys.stdout
        elif not hasattr(out, "encoding"):
            out = _TextOut(out)  # type: ignore[arg-type]
        encoding = getattr(out, "encoding", None) or "utf-8"
        if not _is_utf8(encoding) and hasattr(out, "buffer"):
            out.flush()  # an ASCII or Latin-1 locale: what it cannot show becomes "?"
            out = _TextOut(out.buffer, encoding)  # type: ignore[union-attr]
        terminal = bool(getattr(out, "isatty", lambda: False)())
        kwargs: dict[str, Any] = {}
        if color is False:
            kwargs["color_system"] = None
        elif color is True:
            kwargs["force_terminal"] = True
        self._console = Console(
            file=out,  # type: ignore[arg-type]
            width=width,
            highlight=False,
            markup=False,
            emoji=False,
            soft_wrap=False,
            **kwargs,
        )
        passes_broken_pipe(self._console)
        if self._console.width < 1:  # COLUMNS=0 (or less) names no width
            self._console.width = 80
        self._use_live = terminal if live is None else live
        self._live: Any = None
        self._atexit = False
        self._tally = _Tally()
        self._streaming = ""  # tail of the text being streamed (delta events)
        self._waiting: str | None = None  # what the footer says until the first event
        self._cwd = _cwd()
        self._sessions: set[Any] = set()  # whose events came: from a second one, lines say

    # ------------------------------------------------------------ writer interface

    def waiting(self, text: str) -> bool:
        """Say ``text`` in the footer until the first event ("starting OpenCode…"); False
        when there is no footer (not a terminal) to say it in."""
        if not self._use_live:
            return False
        self._waiting = text
        if self._live is None:
            self._start_live()
        self._live.refresh()
        return True

    def write(self, events: Iterable[Event]) -> None:
        if self._use_live and self._live is None:
            self._start_live()
        print_ = self._console.print
        for event in events:
            self._waiting = None
            line = self._line(event)
            if line is None:
                continue
            line.plain = visible(line.plain)  # one character for one: the styles stay put
            if event.reverted:  # undone by the user (/undo), still stored: struck through
                line.stylize("dim strike")
            sid = event.session_id
            if isinstance(sid, str) and sid:
                self._sessions.add(sid)
                if len(self._sessions) > 1:  # several at once (attach, --all): whose it is
                    line = _tagged(line, sid)
            if line.no_wrap:  # one line per event: cut to the width, never wrapped
                print_(line, no_wrap=True, overflow="ellipsis", crop=True)
            else:
                print_(line)
        if self._live is not None:
            self._live.refresh()  # the footer drawn while printing was the last one

    def end_batch(self) -> None:
        if self._live is not None:
            self._live.refresh()
        else:
            self._console.file.flush()

    def flush(self) -> None:
        """End of output (for now): the footer goes away, everything is written."""
        self._stop_live()
        self._console.file.flush()

    def _stop_live(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()  # also shows the cursor again

    # ------------------------------------------------------------ footer

    def _start_live(self) -> None:
        from rich.live import Live

        self._live = Live(
            console=self._console,
            get_renderable=self._footer,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            # Notes on stderr (attach's reconnects) above the footer, not glued to it, when
            # both go to this terminal; a stderr sent elsewhere stays where it goes.
            redirect_stderr=_same_terminal(self._console.file),
        )
        self._live.start()
        if not self._atexit:  # Ctrl-C or an error must not leave the cursor hidden
            atexit.register(self._stop_live)
            self._atexit = True

    def _footer(self) -> Any:
        from rich.text import Text

        t = self._tally
        text = Text(no_wrap=True, overflow="ellipsis")
        if self._waiting is not None:
            text.append(self._waiting, "dim italic")
            return text
        text.append("steps ", "dim")
        text.append(str(t.steps), "bold")
        text.append(" · tool calls ", "dim")
        text.append(str(len(t.calls)), "bold")
        outcomes = _outcomes(len(t.failed), len(t.bad_exits))
        if outcomes:
            text.append(outcomes, "red")
        # Subagents whose steps are not in these figures: said, not left out silently
        if t.subagents and self._subagents_at_end:
            text.append(f" · +{counted(len(t.subagents), 'subagent')} at the end", "dim")
        elif t.subagents - t.sessions:  # none of its events came (no --children, a stream)
            unseen = len(t.subagents - t.sessions)
            text.append(f" · +{counted(unseen, 'subagent')} not counted here", "dim")
        text.append(" · ", "dim")
        text.append(f"${t.cost:.4f}", "bold")  # before the breakdown, which a narrow line cuts
        text.append(" · tokens ", "dim")
        text.append(format_tokens(t.total), "bold")
        text.append(
            f" ({_breakdown(t.input, t.output, t.reasoning, t.cache_read, t.cache_write)})", "dim"
        )
        if self._streaming:
            tail = visible(self._streaming.replace("\n", " ")[-60:])
            text.append("\n… " + tail, "dim italic")
        return text

    # ------------------------------------------------------------ lines

    def _line(self, event: Event) -> Any:
        from rich.text import Text

        tally = self._tally
        if isinstance(event, Delta):
            self._streaming = (self._streaming + event.delta)[-200:]
            return None
        if isinstance(event, (Message, Reasoning)):
            self._streaming = ""
        if isinstance(event, Message):
            if event.summary:  # a compaction's summary: shown apart from the answers
                return _block("⟲ ", event.text, "magenta", self._max_lines)
            return _block("› ", event.text, "", self._max_lines)
        if isinstance(event, Reasoning):
            return _block("∴ ", event.text, "dim italic", self._max_lines)
        if isinstance(event, Prompt):
            return _block("» ", event.text, "bold cyan", self._max_lines)
        if isinstance(event, Usage):
            tally.steps += 1
            tally.input += event.input_tokens
            tally.output += event.output_tokens
            tally.reasoning += event.reasoning_tokens
            tally.cache_read += event.cache_read_tokens
            tally.cache_write += event.cache_write_tokens
            tally.total += event.total_tokens
            tally.cost += event.cost
            return self._usage(event)
        if isinstance(event, Error):
            text = Text(no_wrap=True, overflow="ellipsis", style="bold red")
            text.append(f"{FAIL} {'error':<{_LABEL_WIDTH}}")
            name = event.name or "error"
            text.append(visible(f"{name}: {_first_line(event.message)}" if event.message else name))
            return text
        if isinstance(event, Warning):
            text = Text(no_wrap=True, overflow="ellipsis", style="yellow")
            where = f"line {event.line}: " if event.line is not None else ""
            text.append(visible(f"! {'warning':<{_LABEL_WIDTH}}{where}{event.message}"))
            return text
        if isinstance(event, Permission):
            return self._permission(event)
        if isinstance(event, Question):
            return self._question(event)
        if isinstance(event, Compaction):
            text = Text(no_wrap=True, style="magenta")
            text.append(f"⟲ {'compaction':<{_LABEL_WIDTH}}")
            text.append("automatic" if event.auto else "summarized")
            if event.overflow:
                text.append(" (the context overflowed)")
            return text
        if isinstance(event, Attachment):
            text = Text(no_wrap=True, overflow="ellipsis", style="cyan")
            what = _rel(event.path, self._cwd) or event.url or event.name or ""
            mime = f" ({event.mime})" if event.mime else ""
            text.append(visible(f"+ {'attached':<{_LABEL_WIDTH}}{what}{mime}"))
            return text
        if isinstance(event, Mention):
            text = Text(no_wrap=True, overflow="ellipsis", style="cyan")
            text.append(visible(f"@ {'mention':<{_LABEL_WIDTH}}{event.agent or ''}"))
            return text
        if isinstance(event, Subtask):
            text = Text(no_wrap=True, overflow="ellipsis", style="cyan")
            agent = f"{event.agent}: " if event.agent else ""
            what = event.description or _first_line(event.prompt) or ""
            text.append(visible(f"» {'subtask':<{_LABEL_WIDTH}}{agent}{what}"))
            return text
        if isinstance(event, Patch):
            text = Text(no_wrap=True, overflow="ellipsis", style="dim")
            files = ", ".join(_rel(path, self._cwd) for path in event.files)
            text.append(visible(f"Δ {'changed':<{_LABEL_WIDTH}}{files}"))
            return text
        if isinstance(event, Retry):
            text = Text(no_wrap=True, overflow="ellipsis", style="yellow")
            attempt = f"attempt {event.attempt}" if event.attempt is not None else "retry"
            why = f": {_first_line(event.message)}" if event.message else ""
            text.append(visible(f"↻ {'retry':<{_LABEL_WIDTH}}{attempt}{why}"))
            return text
        if isinstance(event, Metrics):
            return self._summary(event)
        if isinstance(event, Unknown) and event.tool is None:
            text = Text(no_wrap=True, overflow="ellipsis", style="dim")
            text.append(visible(f"? {'unknown':<{_LABEL_WIDTH}}{event.type or ''}"))
            return text
        tally.sessions.add(event.session_id)
        if isinstance(event, Orchestration) and event.child_session_id:
            tally.subagents.add(event.child_session_id)
        tool = getattr(event, "tool", None)
        if isinstance(tool, str):
            call = (event.session_id, event.call_id or event.part_id or event.seq)
            tally.calls.add(call)
            if event_failed(event):
                tally.failed.add(call)
            elif event_command_failed(event):
                tally.bad_exits.add(call)
            return self._tool(event)
        return None

    def _usage(self, event: Usage) -> Any:
        from rich.text import Text

        # (text, how early it goes when the line is too long: 0 never); the total and the
        # cost stay in view on any terminal, the break-down goes first
        parts = [
            (f"{format_tokens(event.total_tokens)} tokens", 0),
            (f"{format_tokens(event.input_tokens)} in", 2),
            (f"{format_tokens(event.output_tokens)} out", 2),
        ]
        if event.reasoning_tokens:
            parts.append((f"{format_tokens(event.reasoning_tokens)} reasoning", 3))
        if event.cache_read_tokens:
            parts.append((f"{format_tokens(event.cache_read_tokens)} cache read", 3))
        if event.cache_write_tokens:
            parts.append((f"{format_tokens(event.cache_write_tokens)} cache write", 4))
        parts.append((f"${event.cost:.4f}", 0))
        if event.reason:
            parts.append((visible(event.reason), 1))
        label = f"  {'step ' + str(event.turn):<{_LABEL_WIDTH}}"

        def line() -> str:
            return label + " · ".join(text for text, _ in parts)

        while len(line()) > self._console.width and any(drop for _, drop in parts):
            parts.pop(max(range(len(parts)), key=lambda i: (parts[i][1], i)))  # ties: the last
        if len(line()) > self._console.width:  # a very narrow terminal: a shorter label
            label = f"  #{event.turn} "
        return Text(line(), style="dim", no_wrap=True, overflow="ellipsis")

    def _permission(self, event: Permission) -> Any:
        from rich.text import Text

        text = Text(no_wrap=True, overflow="ellipsis")
        if event.reply is None:
            text.append(f"? {'permission':<{_LABEL_WIDTH}}", "bold yellow")
            subject = event.permission or ""
            if event.patterns:
                subject += ": " + ", ".join(event.patterns)
            text.append(visible(subject), "yellow")
        else:
            style = "red" if event.reply == "reject" else "green"
            glyph = FAIL if event.reply == "reject" else OK
            text.append(f"{glyph} {'permission':<{_LABEL_WIDTH}}", style)
            text.append(event.reply, style)
        return text

    def _question(self, event: Question) -> Any:
        from rich.text import Text

        text = Text(no_wrap=True, overflow="ellipsis")
        if event.reply is None:
            text.append(f"? {'question':<{_LABEL_WIDTH}}", "bold yellow")
            text.append(visible(" · ".join(event.questions or [])), "yellow")
        elif event.reply == "reject":
            text.append(f"{FAIL} {'question':<{_LABEL_WIDTH}}", "red")
            text.append("dismissed", "red")
        else:
            text.append(f"{OK} {'question':<{_LABEL_WIDTH}}", "green")
            answers = " · ".join(", ".join(labels) for labels in event.answers or [])
            text.append(visible(answers or event.reply), "green")
        return text

    def _tool(self, event: Any) -> Any:
        from rich.cells import cell_len, set_cell_size
        from rich.text import Text

        success = event.success
        glyph, style = (
            (FAIL, "red")
            if event_failed(event) or event_command_failed(event)
            else (OK, "green")
            if success
            else (NEUTRAL, "yellow")
        )
        tool = event.tool
        subject = visible(_subject(event, self._cwd)).replace("\t", " ")  # one line: no tab stops
        details = Text(style="dim")
        if getattr(event, "exit_code", None) is not None:  # a command, or a file op from bash
            details.append(f"exit {event.exit_code}", "dim" if event.exit_code == 0 else "red")
        elif getattr(event, "interrupted", None):  # bash killed it: "timeout" or "abort"
            details.append("timed out" if event.interrupted == "timeout" else "aborted", "red")
        duration = format_duration(event.duration_ms)
        if duration:
            details.append((" · " if details else "") + duration)
        head = f"{glyph} {visible(tool):<{_LABEL_WIDTH - 1}} "
        # Measured in terminal cells: a CJK character or an emoji takes two.
        room = (
            self._console.width - cell_len(head) - (cell_len(details.plain) + 2 if details else 0)
        )
        error = visible(_first_line(event.error)) if success is False and event.error else ""
        if error:  # the error's start stays in view too, after the duration
            room -= min(cell_len(error), 24) + 2
        if cell_len(subject) > room:  # cut the subject, keep exit code and duration in view
            subject = set_cell_size(subject, max(room - 1, 8)).rstrip() + "…"
        if error:  # the error gets what room is left
            details.append(("  " if details else "") + error, "red")
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(glyph + " ", style)
        text.append(head[2:], "bold")
        text.append(subject)
        if details:
            text.append("  ")
            text.append_text(details)
        return text

    def _summary(self, event: Metrics) -> Any:
        from rich.text import Text

        text = Text(no_wrap=True, overflow="ellipsis", style="bold")
        failed = _outcomes(event.tool_failures, getattr(event, "command_failures", 0))
        subagents = event.subagent_sessions if event.total_cost is not None else None
        if subagents and event.subagent_inferences is not None:
            # Folded as `sessions` folds a row: every figure with the subagents', and their
            # part said apart (+sub)
            steps = event.turns + event.subagent_inferences
            calls = event.tool_calls + (event.subagent_tool_calls or 0)
            tokens = event.total_tokens + (event.subagent_tokens or 0)
            text.append(
                f"── {counted(steps, 'step')} · {counted(calls, 'tool call')}{failed}"
                f" · {format_tokens(tokens)} tokens · ${event.total_cost:.4f} +sub"
                f" ({counted(subagents, 'subagent')}: "
                f"{counted(event.subagent_inferences, 'step')}, ${event.subagent_cost or 0:.4f})"
            )
        else:
            text.append(
                f"── {counted(event.turns, 'step')} · {counted(event.tool_calls, 'tool call')}"
                f"{failed} · {format_tokens(event.total_tokens)} tokens · ${event.cost:.4f}"
            )
        if subagents and event.subagent_inferences is None:  # no counts from the store
            text.append(
                f" + ${event.subagent_cost or 0:.4f} in "
                f"{counted(subagents, 'subagent')} = ${event.total_cost:.4f}"
            )
        problems = event.counts.get("error", 0) + event.counts.get("warning", 0)
        if problems:
            text.append(f" · {counted(problems, 'problem')}", "red")
        return text


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:
        return ""


def _rel(path: str | None, cwd: str) -> str:
    """A path under the current directory is shown relative to it."""
    if not path:
        return ""
    if cwd and path.startswith(cwd) and path[len(cwd) : len(cwd) + 1] == "/":
        return path[len(cwd) + 1 :]
    return path


def _tagged(line: Any, session_id: str) -> Any:
    """``line`` after the end of its session's id, dim: the random end tells sessions apart
    (their starts are the time they were made, shared by sessions made together)."""
    from rich.text import Text

    tag = Text(f"…{visible(session_id[-5:])} ", style="dim", no_wrap=line.no_wrap)
    tag.overflow = line.overflow
    tag.append_text(line)
    return tag


def _block(prefix: str, body: str, style: str, max_lines: int | None = None) -> Any:
    """A message-like event: its text, continuation lines indented; past ``max_lines``
    lines cut, with how many more there were."""
    from rich.text import Text

    lines = body.strip("\n").split("\n")
    more = len(lines) - max_lines if max_lines is not None and len(lines) > max_lines else 0
    if more:
        lines = lines[:max_lines]
    indent = " " * len(prefix)
    # visible() before rich, which drops BEL, BS and CR unseen
    text = Text(prefix + ("\n" + indent).join(visible(line) for line in lines), style=style)
    if more:
        text.append(
            f"\n{indent}… ({more} more line{'s' if more > 1 else ''}; --full shows all)", "dim"
        )
    return text


def _subject(event: Any, cwd: str = "") -> str:
    """What a tool event acted on: the file, the command, the pattern, the agent."""
    tool = event.tool.lower()
    if isinstance(event, Read):
        subject = _rel(event.path, cwd)
        return subject if tool == "read" else f"read {subject}"
    if isinstance(event, Write):
        subject = _rel(event.path, cwd)
        if event.to:
            subject += f" → {_rel(event.to, cwd)}"
        op = event.op
        if tool in ("write", "edit") and op in (None, tool):
            return subject
        return f"{op or 'write'} {subject}"
    if isinstance(event, Search):
        words = [repr(event.pattern)] if event.pattern is not None else []
        if event.path:
            at = f":{event.position}" if event.position else ""
            words.append(f"{'at' if at else 'in'} {_rel(event.path, cwd)}{at}")
        if event.operation:  # lsp
            return " ".join([event.operation, *words])
        return " ".join(words if tool in ("grep", "glob") else ["search", *words])
    if isinstance(event, Command):
        return _first_line(event.command, 500)
    if isinstance(event, Orchestration):
        subject = event.agent or ""
        if event.description:
            subject += (": " if subject else "") + event.description
        return subject + (" (in the background)" if event.background else "")
    if isinstance(event, Skill):
        return event.name or ""
    if getattr(event, "via", None):  # a call code mode's script made: its raw is the script's
        return f"via {event.via}"
    if getattr(event, "url", None):
        return event.url
    if getattr(event, "query", None):
        return f"search {event.query}"
    return _first_line(getattr(event, "title", None)) or _input_of(getattr(event, "raw", None))


def _input_of(raw: Any) -> str:
    """The input of the tool part an ``unknown`` event carries (an MCP tool's arguments),
    as compact JSON; "" when there is none."""
    if raw is None:
        return ""
    try:
        record = msgspec.json.decode(raw)
    except (msgspec.DecodeError, TypeError):
        return ""
    if not isinstance(record, dict):
        return ""
    # the part itself (store), under "part" (run stream) or under "properties" (server)
    holder = record.get("properties") if isinstance(record.get("properties"), dict) else record
    part = holder.get("part", holder)
    state = part.get("state") if isinstance(part, dict) else None
    value = state.get("input") if isinstance(state, dict) else None
    return msgspec.json.encode(value).decode() if value else ""


class FullScreen:
    """A screen of its own on a terminal (the alternate screen, as `top` and `less` use),
    redrawn on ``show``; the terminal's own screen comes back on ``close``."""

    def __init__(self, out: TextIO) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console(file=showable(out))
        self._live = Live(
            console=self.console,
            screen=True,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()
        if not _OPEN_SCREENS:  # Ctrl-C or an error must not leave the screen switched
            atexit.register(_close_open_screens)  # once: a second registration is a no-op
        _OPEN_SCREENS[id(self)] = self

    @property
    def size(self) -> tuple[int, int]:
        return self.console.width, self.console.height

    def show(self, renderable: Any) -> None:
        self._live.update(renderable, refresh=True)

    def close(self) -> None:
        self._live.stop()
        _OPEN_SCREENS.pop(id(self), None)  # one screen after another (Ctrl-Z, fg): none kept


# The screens open now, closed at exit; one exit handler for all of them.
_OPEN_SCREENS: dict[int, FullScreen] = {}


def _close_open_screens() -> None:
    for screen in list(_OPEN_SCREENS.values()):
        screen.close()


def _same_terminal(out: Any) -> bool:
    """Whether stderr is the terminal ``out`` writes to."""
    try:
        err = sys.stderr
        if err is None or not err.isatty() or not out.isatty():
            return False
        return os.ttyname(err.fileno()) == os.ttyname(out.fileno())
    except (AttributeError, OSError, ValueError):
        return False

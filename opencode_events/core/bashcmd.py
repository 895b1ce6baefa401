"""Recognize OpenCode ``bash`` tool calls that are plainly file operations.

``classify_bash(command, workdir)`` returns a tuple of ``FileOp`` (``read``, ``write`` or
``search``) when the whole shell command is clearly made of file operations -- ``cat
a.py``, ``rm -rf build``, ``cat > f <<'EOF' ... EOF``, ``grep -rn foo src | head`` -- and
``None`` otherwise, in which case the caller emits a ``command`` event. docs/bash.md
lists every rule with examples.

The guiding rule is that a wrong guess is worse than none: any construct that is not
understood exactly (unknown flags, command or process substitution, variables in paths,
compound commands, background jobs, redirects on other commands, ...) gives ``None``.

The module has its own small shell lexer (quotes, escapes, parameter expansion markers,
redirections, here-documents, brace expansion) because ``shlex`` knows neither
operators nor here-documents. It uses only the standard library, never prints, and
never raises: every input string, however malformed, yields ``None`` or a result. Work
is bounded (input size, tokens, lexer steps, nesting, expansions), so the cost stays
linear and small.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

__all__ = ["FileOp", "MAX_COMMAND_CHARS", "classify_bash"]

# ------------------------------------------------------------------------ limits

#: Longer commands are not classified. Large here-documents are common (``cat > f
#: <<'EOF'`` with a whole file), and their bodies are skipped with C-speed scans, so
#: the cap is well above the size of a typical agent-written file.
MAX_COMMAND_CHARS = 256 * 1024
_MAX_TOKENS = 2_000  # words, operators and redirections
_MAX_STEPS = 20_000  # Python-level lexer iterations inside words
_MAX_DEPTH = 3  # nested `bash -c '...'`
_MAX_EXPANSIONS = 64  # words produced by one brace expansion
_MAX_BRACE_WORD = 256  # longest word that brace expansion is attempted on
_MAX_SED_SCRIPT = 4_096
_MAX_PIPELINE = 8
_MAX_OPS = 512


# ------------------------------------------------------------------------ result


@dataclass(frozen=True, slots=True)
class FileOp:
    kind: str  # "read" | "write" | "search"
    path: str | None = None
    op: str | None = None  # writes: write append delete move copy mkdir touch edit
    to: str | None = None  # move/copy destination
    pattern: str | None = None  # searches


def classify_bash(command: str, workdir: str | None = None) -> tuple[FileOp, ...] | None:
    """File operations performed by ``command``, in order.

    None means: not clearly a file operation; the caller emits a ``command`` event.
    Paths are kept as written; they are joined onto the directory of a preceding
    ``cd`` and, when ``workdir`` is given, onto ``workdir`` (see docs/bash.md).
    """
    try:
        if not isinstance(command, str) or len(command) > MAX_COMMAND_CHARS:
            return None
        if "\x00" in command:
            return None
        if _head_is_foreign(command):
            return None
        base = None
        if isinstance(workdir, str) and workdir and not _CTRL.search(workdir):
            base = workdir
        ops = _script(command, base, 0)
        return tuple(ops) or None
    except _Reject:
        return None
    except Exception:  # defensive: a classifier bug must never break normalization
        return None


# ------------------------------------------------------------------------ internals


# The first simple command's name, when it can be read without the lexer: optional plain
# assignments, then a plain word followed by whitespace, an operator or the end.
_HEAD = re.compile(
    r"[ \t\n]*(?:[A-Za-z_][A-Za-z0-9_]*=[^ \t\n'\"`$\\;&|<>(){}]*[ \t]+)*"
    r"([A-Za-z0-9_./:+-]+)(?=[ \t\n;&|()]|$)"  # not before < or >: `2>&1 cat f`
)


# Command separators, when no quoting can hide one: `&` and `|` only where they are not part
# of a redirection (`2>&1`, `>&2`, `&>file`, `>|file`).
_SEPARATORS = re.compile(r"\|\||&&|[;\n]|(?<!>)\||(?<![<>])&(?!>)")
_QUOTING = re.compile(r"""['"\\$`#]|<<""")


def _head_is_foreign(command: str) -> bool:
    """True when a command in it is surely none we classify (``pytest -q``, ``echo x; make``).

    A shortcut, not a rule: every command the full parse could accept consists of members
    that start with a handler, ``cd``, a shell, a wrapper or a filter, so rejecting the rest
    early changes no answer and spares the lexer on the most common bash calls. Without
    quoting, every member's head is checked; otherwise only the first.
    """
    # The usual case first: the first command's name (the match stops within the first
    # command, or at a blank line before it) is plainly none we know.
    match = _HEAD.match(command)
    if match is not None:
        name = match.group(1)
        if "/" not in name and name not in _KNOWN_HEADS:
            return True
    quoted = _QUOTING.search(command) is not None
    segments = [command] if quoted else _SEPARATORS.split(command)
    heads = []
    for segment in segments:
        match = _HEAD.match(segment)
        if match is None:
            continue  # a redirection first, a group, …: let the parser decide
        name = match.group(1)
        if "/" in name:
            for prefix in _BIN_DIRS:
                if name.startswith(prefix) and "/" not in name[len(prefix) :]:
                    name = name[len(prefix) :]
                    break
        if name not in _KNOWN_HEADS:
            return True
        heads.append(name)
    # `echo`/`printf` change a file only through `>` or a `| tee`: without either, no. A
    # tee may come behind a wrapper (`| time tee f`), so the word is looked for anywhere.
    return (
        not quoted
        and ">" not in command
        and "tee" not in command
        and any(name in _CONTENT_COMMANDS for name in heads)
    )


class _Reject(Exception):
    """Internal: the command is not clearly a file operation."""


def _reject() -> NoReturn:
    raise _Reject


_CTRL = re.compile(r"[\x00-\x1f\x7f]")


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _read(path: str) -> FileOp:
    return FileOp("read", path=path)


def _search(path: str, pattern: str | None) -> FileOp:
    return FileOp("search", path=path, pattern=pattern)


def _change(path: str, op: str, to: str | None = None) -> FileOp:
    return FileOp("write", path=path, op=op, to=to)


# ------------------------------------------------------------------------ words


class _Word:
    """One shell word after quote removal.

    ``runs`` keeps (text, quoted) pieces so that globbing and brace expansion only look
    at unquoted characters. Parameter expansions are kept verbatim as quoted runs and
    set ``dynamic``: the word's real value is unknown.
    """

    __slots__ = ("runs", "text", "dynamic", "glob", "brace", "quoted")

    def __init__(self, runs: list[tuple[str, bool]], dynamic: bool = False) -> None:
        self.runs = runs
        self.text = "".join(t for t, _ in runs)
        self.dynamic = dynamic
        unquoted = "".join(t for t, q in runs if not q)
        self.glob = "*" in unquoted or "?" in unquoted or "[" in unquoted
        self.brace = "{" in unquoted and "}" in unquoted
        self.quoted = any(q for _, q in runs)

    def sliced(self, start: int) -> _Word:
        """The word without its first ``start`` characters (an attached option value)."""
        runs: list[tuple[str, bool]] = []
        pos = 0
        for text, quoted in self.runs:
            end = pos + len(text)
            if end > start:
                runs.append((text[max(0, start - pos) :], quoted))
            pos = end
        return _Word(runs or [("", True)], self.dynamic)


def _chars_to_word(chars: list[tuple[str, bool]], dynamic: bool) -> _Word:
    runs: list[tuple[str, bool]] = []
    for ch, quoted in chars:
        if runs and runs[-1][1] == quoted:
            runs[-1] = (runs[-1][0] + ch, quoted)
        else:
            runs.append((ch, quoted))
    return _Word(runs or [("", True)], dynamic)


def _expand_braces(word: _Word) -> list[_Word]:
    """Bash brace expansion of comma lists (``src/{a,b}.py``); sequences are rejected."""
    if not word.brace:
        return [word]
    if len(word.text) > _MAX_BRACE_WORD:
        _reject()
    chars = [(ch, quoted) for text, quoted in word.runs for ch in text]
    return [_chars_to_word(c, word.dynamic) for c in _brace_chars(chars)]


def _brace_chars(chars: list[tuple[str, bool]]) -> list[list[tuple[str, bool]]]:
    n = len(chars)
    for start in range(n):
        ch, quoted = chars[start]
        if quoted or ch != "{":
            continue
        depth = 0
        commas: list[int] = []
        end = -1
        for k in range(start, n):
            ck, qk = chars[k]
            if qk:
                continue
            if ck == "{":
                depth += 1
            elif ck == "}":
                depth -= 1
                if depth == 0:
                    end = k
                    break
            elif ck == "," and depth == 1:
                commas.append(k)
        if end < 0:
            return [chars]
        if not commas:
            if ".." in "".join(c for c, _ in chars[start + 1 : end]):
                _reject()  # {1..3} sequence expressions: not worth the risk
            continue
        prefix, suffix = chars[:start], chars[end + 1 :]
        bounds = [start, *commas, end]
        out: list[list[tuple[str, bool]]] = []
        for a, b in zip(bounds, bounds[1:], strict=False):
            for expanded in _brace_chars(prefix + chars[a + 1 : b] + suffix):
                out.append(expanded)
                if len(out) > _MAX_EXPANSIONS:
                    _reject()
        return out
    return [chars]


# ------------------------------------------------------------------------ lexer


class _Redir:
    __slots__ = ("fd", "op", "target", "dup")

    def __init__(self, fd: int | None, op: str, target: _Word, dup: bool) -> None:
        self.fd = fd
        self.op = op
        self.target = target
        self.dup = dup


_META = frozenset(" \t\n|&;()<>")
_PLAIN = re.compile(r"[^ \t\n|&;()<>'\"\\$`]+")
_DQ_PLAIN = re.compile(r'[^"\\$`]+')
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FD = re.compile(r"[0-9]{1,2}")
_NAMED_FD = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")
_DUP_TARGET = re.compile(r"[0-9]+-?|-")
# An unescaped command substitution in an unquoted here-document body.
_BODY_SUBST = re.compile(r"(?<!\\)(?:\\\\)*(?:\$[(\[]|`)")

Token = tuple[str, object]  # ("w", _Word) | ("op", str) | ("r", _Redir)


class _Lexer:
    def __init__(self, src: str) -> None:
        self.src = src
        self.n = len(src)
        self.i = 0
        self.toks: list[Token] = []
        self.pending: list[tuple[bool, str, bool]] = []  # here-docs awaiting a body
        self.steps = 0
        self.dynamic = False

    def run(self) -> list[Token]:
        src, n = self.src, self.n
        while self.i < n:
            if len(self.toks) > _MAX_TOKENS:
                _reject()
            c = src[self.i]
            if c == " " or c == "\t":
                self.i += 1
            elif c == "\n":
                self.i += 1
                self.toks.append(("op", "\n"))
                if self.pending:
                    self._bodies()
            elif c == "\\" and src.startswith("\\\n", self.i):
                self.i += 2
            elif c == "#":
                j = src.find("\n", self.i)
                self.i = n if j < 0 else j
            elif c in "|&;()<>":
                self._operator(None)
            else:
                word = self._word()
                if self.i < n and src[self.i] in "<>" and len(word.runs) == 1 and not word.quoted:
                    if _FD.fullmatch(word.text):
                        self._operator(int(word.text))
                        continue
                    if _NAMED_FD.fullmatch(word.text):
                        _reject()  # {var}>file allocates a descriptor
                self.toks.append(("w", word))
        if self.pending:
            _reject()  # here-document without a body
        return self.toks

    # -- operators and redirections

    def _operator(self, fd: int | None) -> None:
        src, i = self.src, self.i
        two, three = src[i : i + 2], src[i : i + 3]
        if fd is not None and src[i] not in "<>":
            _reject()
        if two in ("&&", "||"):
            self.toks.append(("op", two))
            self.i += 2
        elif three == "&>>":
            self._redirect(fd, "&>>", 3)
        elif two == "&>":
            self._redirect(fd, "&>", 2)
        elif src[i] == "|":
            if two == "|&":
                _reject()
            self.toks.append(("op", "|"))
            self.i += 1
        elif src[i] == ";":
            if two in (";;", ";&"):
                _reject()
            self.toks.append(("op", ";"))
            self.i += 1
        elif src[i] == "<":
            if three == "<<<":
                self._redirect(fd, "<<<", 3)
            elif three == "<<-":
                self._redirect(fd, "<<-", 3)
            elif two in ("<<", "<&"):
                self._redirect(fd, two, 2)
            elif two in ("<>", "<("):
                _reject()
            else:
                self._redirect(fd, "<", 1)
        elif src[i] == ">":
            if two in (">>", ">&", ">|"):
                self._redirect(fd, two, 2)
            elif two == ">(":
                _reject()
            else:
                self._redirect(fd, ">", 1)
        else:  # "&" (background), "(", ")"
            _reject()

    def _redirect(self, fd: int | None, op: str, width: int) -> None:
        src, n = self.src, self.n
        i = self.i + width
        while i < n and src[i] in " \t":
            i += 1
        if i >= n or src[i] in _META:
            _reject()
        self.i = i
        target = self._word()
        if op in ("<<", "<<-"):
            if target.dynamic:
                _reject()
            self.pending.append((op == "<<-", target.text, target.quoted))
        dup = op in (">&", "<&") and _DUP_TARGET.fullmatch(target.text) is not None
        self.toks.append(("r", _Redir(fd, op, target, dup)))

    def _bodies(self) -> None:
        """Skip the bodies of the here-documents started on the line just ended."""
        src = self.src
        for strip_tabs, delim, quoted in self.pending:
            pattern = "^" + (r"\t*" if strip_tabs else "") + re.escape(delim) + "$"
            m = re.compile(pattern, re.MULTILINE).search(src, self.i)
            if m is None:
                _reject()  # unterminated here-document
            if not quoted and _BODY_SUBST.search(src, self.i, m.start()):
                _reject()  # the body runs commands: $(...) or `...`
            self.i = min(m.end() + 1, self.n)
        self.pending.clear()

    # -- words

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            _reject()

    def _word(self) -> _Word:
        src, n = self.src, self.n
        runs: list[tuple[str, bool]] = []
        self.dynamic = False
        i = self.i
        while i < n:
            self._tick()
            c = src[i]
            if c in _META:
                break
            if c == "'":
                j = src.find("'", i + 1)
                if j < 0:
                    _reject()
                runs.append((src[i + 1 : j], True))
                i = j + 1
            elif c == '"':
                i = self._double(i + 1, runs)
            elif c == "\\":
                if i + 1 >= n:
                    _reject()
                if src[i + 1] != "\n":
                    runs.append((src[i + 1], True))
                i += 2
            elif c == "$":
                i = self._dollar(i, runs, in_double=False)
            elif c == "`":
                _reject()
            else:
                m = _PLAIN.match(src, i)
                if m is None:
                    _reject()
                runs.append((m.group(), False))
                i = m.end()
        self.i = i
        if not runs:
            runs.append(("", True))
        return _Word(runs, self.dynamic)

    def _double(self, i: int, runs: list[tuple[str, bool]]) -> int:
        src, n = self.src, self.n
        start = len(runs)
        while i < n:
            self._tick()
            m = _DQ_PLAIN.match(src, i)
            if m is not None:
                runs.append((m.group(), True))
                i = m.end()
                continue
            c = src[i]
            if c == '"':
                if len(runs) == start:
                    runs.append(("", True))
                return i + 1
            if c == "\\":
                if i + 1 >= n:
                    _reject()
                nxt = src[i + 1]
                if nxt in '$`"\\':
                    runs.append((nxt, True))
                    i += 2
                elif nxt == "\n":
                    i += 2
                else:
                    runs.append(("\\", True))
                    i += 1
            elif c == "$":
                i = self._dollar(i, runs, in_double=True)
            else:  # backquote
                _reject()
        _reject()

    def _dollar(self, i: int, runs: list[tuple[str, bool]], in_double: bool) -> int:
        src, n = self.src, self.n
        nxt = src[i + 1] if i + 1 < n else ""
        if nxt in ("(", "["):
            _reject()  # command substitution or arithmetic
        if nxt == "{":
            j, depth = i + 2, 1
            while j < n:
                self._tick()
                ch = src[j]
                if ch == "\\":
                    j += 2
                    continue
                if ch in "'\"`" or (ch == "$" and src[j + 1 : j + 2] in ("(", "[")):
                    _reject()
                if ch == "{":
                    depth += 1
                elif ch == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j >= n:
                _reject()
            runs.append((src[i : j + 1], True))
            self.dynamic = True
            return j + 1
        m = _NAME.match(src, i + 1)
        if m is not None:
            runs.append((src[i : m.end()], True))
            self.dynamic = True
            return m.end()
        if nxt and nxt in "0123456789@*#?$!-":
            runs.append((src[i : i + 2], True))
            self.dynamic = True
            return i + 2
        if not in_double and nxt == "'":  # $'...' (ANSI-C quoting): value not decoded
            j = i + 2
            while j < n and src[j] != "'":
                self._tick()
                j += 2 if src[j] == "\\" else 1
            if j >= n:
                _reject()
            runs.append((src[i : j + 1], True))
            self.dynamic = True
            return j + 1
        if not in_double and nxt == '"':  # $"..." (locale translation)
            j = self._double(i + 2, runs)
            self.dynamic = True
            return j
        runs.append(("$", True))
        return i + 1


# ------------------------------------------------------------------------ parser


class _Cmd:
    __slots__ = ("words", "redirs")

    def __init__(self, words: list[_Word], redirs: list[_Redir]) -> None:
        self.words = words
        self.redirs = redirs


def _parse(toks: list[Token]) -> list[tuple[str | None, list[_Cmd]]]:
    """Split into pipelines, each with the connector before it (None, ";", "&&", "||").

    Newlines act like ";". Only simple commands are accepted: "(", "&", "|&" and
    ";;" were already rejected by the lexer, reserved words are rejected later.
    """
    items: list[tuple[str | None, list[_Cmd]]] = []
    pipe: list[_Cmd] = []
    words: list[_Word] = []
    redirs: list[_Redir] = []
    conn: str | None = None
    need = False  # an operator that requires a following command was just seen
    for kind, val in toks:
        if kind == "w":
            words.append(val)  # type: ignore[arg-type]
            need = False
            continue
        if kind == "r":
            redirs.append(val)  # type: ignore[arg-type]
            need = False
            continue
        has_cmd = bool(words or redirs)
        if val == "|":
            if not has_cmd:
                _reject()
            pipe.append(_Cmd(words, redirs))
            words, redirs, need = [], [], True
        elif val in ("&&", "||"):
            if not has_cmd:
                _reject()
            pipe.append(_Cmd(words, redirs))
            items.append((conn, pipe))
            pipe, words, redirs, conn, need = [], [], [], val, True  # type: ignore[assignment]
        elif val in (";", "\n"):
            if not has_cmd:
                if val == ";":
                    _reject()  # `;` with no command before it is a syntax error
                continue  # blank line, or a newline after `|`, `&&`, `||`
            pipe.append(_Cmd(words, redirs))
            items.append((conn, pipe))
            pipe, words, redirs, conn, need = [], [], [], ";", False
        else:
            _reject()
    if words or redirs:
        pipe.append(_Cmd(words, redirs))
        items.append((conn, pipe))
    elif need:
        _reject()
    return items


# ------------------------------------------------------------------------ context


class _Ctx:
    __slots__ = ("base", "depth")

    def __init__(self, base: str | None, depth: int) -> None:
        self.base = base
        self.depth = depth

    def join(self, text: str) -> str:
        base = self.base
        if base is None or text.startswith(("/", "~")):
            return text
        joined = posixpath.normpath(posixpath.join(base, text))
        if text.endswith("/") and not joined.endswith("/"):
            joined += "/"  # `mv a b dir/`: the slash says "a directory"
        return joined

    def path(self, word: _Word, *, glob: bool = True) -> str:
        """A path operand, as written (joined onto the base). Rejects unknowable paths."""
        if word.dynamic or (word.glob and not glob):
            _reject()
        text = word.text
        if not text or text == "-" or _CTRL.search(text):
            _reject()
        if text == "/dev" or text.startswith("/dev/"):
            _reject()  # devices are not files: /dev/null, /dev/stdin, /dev/urandom...
        if text.startswith("~") and word.runs[0][1]:
            _reject()  # a quoted "~" is a literal directory name, not $HOME
        return self.join(text)

    def here(self) -> str:
        return self.join(".")


def _pattern(word: _Word) -> str:
    # An unquoted glob in a pattern may be expanded by the shell before the tool sees it.
    if word.dynamic or word.glob:
        _reject()
    return word.text


# ------------------------------------------------------------------------ commands

_SHELLS = frozenset({"bash", "sh", "zsh", "dash"})
_BIN_DIRS = ("/usr/local/bin/", "/usr/bin/", "/bin/")
_RESERVED = _names(
    "if then else elif fi for while until do done case esac select function in { } ! [[ ]] coproc"
)
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_CONTENT_COMMANDS = frozenset({"echo", "printf", ":", "true"})
_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_COUNT = re.compile(r"[+-]?[0-9]+[A-Za-z]{0,3}")
_NICE = re.compile(r"-n?-?[0-9]+")
_SHELL_FLAGS = re.compile(r"-[lceux]+")


def _is_assignment(word: _Word) -> bool:
    text, quoted = word.runs[0]
    return not quoted and _ASSIGN.match(text) is not None


def _unwrap(words: list[_Word]) -> tuple[str | None, list[_Word], bool]:
    """(command name, arguments, had leading assignments) after stripping wrappers."""
    i = 0
    while i < len(words) and _is_assignment(words[i]):
        i += 1
    had_assignment = i > 0
    rest: list[_Word] = []
    for word in words[i:]:
        rest.extend(_expand_braces(word))
    for _ in range(8):
        if not rest:
            return None, [], had_assignment
        head = rest[0]
        if head.dynamic or head.glob:
            _reject()
        name = head.text
        if not head.quoted and name in _RESERVED:
            _reject()
        for prefix in _BIN_DIRS:
            if name.startswith(prefix) and "/" not in name[len(prefix) :]:
                name = name[len(prefix) :]
                break
        if name in ("command", "time"):
            if len(rest) < 2 or rest[1].text.startswith("-"):
                _reject()
            rest = rest[1:]
        elif name == "env":
            j = 1
            while j < len(rest) and _ASSIGN.match(rest[j].text):
                j += 1
            if j >= len(rest) or rest[j].text.startswith("-"):
                _reject()
            rest = rest[j:]
        elif name == "nice":
            j = 1
            if j < len(rest) and rest[j].text == "-n":
                if j + 1 >= len(rest) or not _NICE.fullmatch("-" + rest[j + 1].text):
                    _reject()
                j += 2
            elif j < len(rest) and _NICE.fullmatch(rest[j].text):
                j += 1
            if j >= len(rest):
                _reject()
            rest = rest[j:]
        else:
            return name, rest[1:], had_assignment
    _reject()


Stdin = tuple[str, _Word | None] | None  # ("file", word) | ("text", None)
Stdout = tuple[_Word, bool] | None  # (target, append)
Handler = Callable[[_Ctx, list[_Word], Stdin, Stdout], list[FileOp]]


def _io(redirs: list[_Redir]) -> tuple[Stdin, Stdout]:
    """The command's stdin source and stdout target; harmless redirections dropped."""
    stdin: Stdin = None
    stdout: Stdout = None
    for r in redirs:
        if r.op in ("<<", "<<-", "<<<"):
            if r.fd not in (None, 0) or stdin is not None:
                _reject()
            stdin = ("text", None)
            continue
        if r.dup:  # 2>&1, >&2, 3>&-
            continue
        if r.target.dynamic:
            _reject()
        expanded = _expand_braces(r.target)
        if len(expanded) != 1:
            _reject()
        target = expanded[0]
        if not target.glob and target.text in _NOT_FILES:
            continue
        if r.op == "<":
            if r.fd not in (None, 0) or stdin is not None:
                _reject()
            stdin = ("file", target)
            continue
        if r.op in (">", ">|", ">>"):
            if r.fd not in (None, 1):
                _reject()  # e.g. 2>errors.log
        elif r.op not in ("&>", "&>>", ">&"):
            _reject()
        if stdout is not None:
            _reject()
        stdout = (target, r.op.endswith(">>"))
    return stdin, stdout


def _write_to(ctx: _Ctx, stdout: tuple[_Word, bool]) -> FileOp:
    word, append = stdout
    return _change(ctx.path(word, glob=False), "append" if append else "write")


def _getopt(
    args: list[_Word],
    flags: str = "",
    with_arg: str = "",
    long_flags: frozenset[str] = frozenset(),
    long_args: frozenset[str] = frozenset(),
    long_optional: frozenset[str] = frozenset(),
    *,
    digits: bool = False,
) -> tuple[list[tuple[str, _Word | None]], list[_Word]]:
    """GNU-style option parsing (options may follow operands; ``--`` ends them).

    Only the listed options are accepted; anything else rejects the command. ``digits``
    accepts ``-NUM`` (``head -20``, ``grep -3``) as the option ``-NUM``.
    """
    opts: list[tuple[str, _Word | None]] = []
    operands: list[_Word] = []
    i, n, done = 0, len(args), False
    while i < n:
        word = args[i]
        text = word.text
        i += 1
        if done or not text.startswith("-") or text == "-":
            operands.append(word)
            continue
        if text == "--":
            done = True
            continue
        if text.startswith("--"):
            name, eq, _ = text.partition("=")
            if name in long_optional or (name in long_flags and not eq):
                opts.append((name, word.sliced(len(name) + 1) if eq else None))
            elif name in long_args:
                if eq:
                    opts.append((name, word.sliced(len(name) + 1)))
                elif i < n:
                    opts.append((name, _separate_value(args[i])))
                    i += 1
                else:
                    _reject()
            else:
                _reject()
            continue
        j = 1
        while j < len(text):
            ch = text[j]
            if digits and ch in "0123456789":
                k = j
                while k < len(text) and text[k] in "0123456789":
                    k += 1
                opts.append(("-NUM", _Word([(text[j:k], False)])))
                j = k
            elif ch in flags:
                opts.append(("-" + ch, None))
                j += 1
            elif ch in with_arg:
                if j + 1 < len(text):
                    opts.append(("-" + ch, word.sliced(j + 1)))
                elif i < n:
                    opts.append(("-" + ch, _separate_value(args[i])))
                    i += 1
                else:
                    _reject()
                break
            else:
                _reject()
    return opts, operands


def _separate_value(word: _Word) -> _Word:
    # `rg -g *.py`: the shell may expand the glob into several words before the tool
    # runs. (An attached value -- `--include=*.py` -- practically never matches a file.)
    if word.glob:
        _reject()
    return word


def _reads(ctx: _Ctx, files: list[_Word], stdin: Stdin) -> list[FileOp]:
    if files:
        if stdin is not None or any(f.text.startswith("+") for f in files):
            _reject()  # `less +G f`, obsolete `tail +5 f`: not a file name
        return [_read(ctx.path(f)) for f in files]
    if stdin is not None and stdin[0] == "file" and stdin[1] is not None:
        return [_read(ctx.path(stdin[1]))]
    _reject()  # reads stdin


def _searches(ctx: _Ctx, operands: list[_Word], patterns: list[str | None]) -> list[FileOp]:
    paths = [ctx.path(w) for w in operands] or [ctx.here()]
    return [_search(p, pat) for p in paths for pat in patterns]


def _no_io(stdin: Stdin, stdout: Stdout) -> None:
    if stdin is not None or stdout is not None:
        _reject()


# -- reads

_CAT_LONG = _names(
    "--show-all --number-nonblank --show-ends --number --squeeze-blank --show-tabs "
    "--show-nonprinting"
)


def _cat(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    _, files = _getopt(args, "AbeEnstTuv", "", _CAT_LONG)
    text_input = not files and stdin is not None and stdin[0] == "text"
    # A here-document / here-string: cat only copies its text.
    ops = [] if text_input else _reads(ctx, files, stdin)
    if stdout is not None:
        ops.append(_write_to(ctx, stdout))
    return ops


_HEAD_LONG = _names("--quiet --silent --verbose --zero-terminated")
_HEAD_LONG_ARGS = frozenset({"--lines", "--bytes"})


def _head_files(args: list[_Word]) -> list[_Word]:
    opts, files = _getopt(args, "qvz", "nc", _HEAD_LONG, _HEAD_LONG_ARGS, digits=True)
    for _, value in opts:
        if value is not None and not _COUNT.fullmatch(value.text):
            _reject()
    return files


def _head(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    if stdout is not None:
        _reject()
    return _reads(ctx, _head_files(args), stdin)


_NL_LONG = frozenset({"--no-renumber"})
_NL_LONG_ARGS = _names(
    "--body-numbering --section-delimiter --footer-numbering --header-numbering "
    "--line-increment --join-blank-lines --number-format --number-separator "
    "--starting-line-number --number-width"
)
_BAT_LONG = _names(
    "--plain --number --show-all --diff --force-colorization --unbuffered "
    "--chop-long-lines --squeeze-blank"
)
_BAT_LONG_ARGS = _names(
    "--language --highlight-line --line-range --map-syntax --tabs --wrap "
    "--terminal-width --color --italic-text --decorations --paging --theme --style "
    "--file-name --diff-context --nonprintable-notation --binary --squeeze-limit"
)


def _reader(
    flags: str,
    with_arg: str = "",
    long_flags: frozenset[str] = frozenset(),
    long_args: frozenset[str] = frozenset(),
) -> Handler:
    def handler(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
        if stdout is not None:
            _reject()
        _, files = _getopt(args, flags, with_arg, long_flags, long_args)
        return _reads(ctx, files, stdin)

    return handler


# -- sed


def _sed_address(s: str, i: int, second: bool) -> int:
    """End of the address at ``i`` (``i`` itself when there is none; -1 if malformed)."""
    n = len(s)
    if i >= n:
        return i
    c = s[i]
    if c in "0123456789" or (second and c in "+~"):
        j = i + 1
        while j < n and s[j] in "0123456789":
            j += 1
        if c in "+~" and j == i + 1:
            return -1
        if not second and j < n and s[j] == "~":
            j += 1
            while j < n and s[j] in "0123456789":
                j += 1
        return j
    if c == "$":
        return i + 1
    if c in "/\\":
        if c == "\\":
            if i + 1 >= n or s[i + 1] in "\n\\":
                return -1
            delim, j = s[i + 1], i + 2
        else:
            delim, j = "/", i + 1
        while j < n and s[j] != delim:
            if s[j] == "\n":
                return -1
            j += 2 if s[j] == "\\" else 1
        if j >= n:
            return -1
        j += 1
        while j < n and s[j] in "IM":
            j += 1
        return j
    return i


def _sed_delimited(s: str, i: int, delim: str, parts: int) -> int:
    n = len(s)
    for _ in range(parts):
        while True:
            if i >= n:
                return -1
            if s[i] == "\\":
                i += 2
                continue
            i += 1
            if s[i - 1] == delim:
                break
    return i


def _to_eol(s: str, i: int) -> int:
    j = s.find("\n", i)
    return len(s) if j < 0 else j


def _sed_scan(s: str) -> list[tuple[str, str]] | None:
    """The (command, s-flags) list of a sed script; None if it is not understood."""
    if len(s) > _MAX_SED_SCRIPT:
        return None
    cmds: list[tuple[str, str]] = []
    i, n = 0, len(s)
    while True:
        while i < n and s[i] in " \t\n;":
            i += 1
        if i >= n:
            return cmds
        if s[i] == "#":
            i = _to_eol(s, i)
            continue
        j = _sed_address(s, i, second=False)
        if j < 0:
            return None
        if j > i and j < n and s[j] == ",":
            k = _sed_address(s, j + 1, second=True)
            if k <= j + 1:
                return None
            j = k
        i = j
        while i < n and s[i] in " \t":
            i += 1
        if i < n and s[i] == "!":
            i += 1
            while i < n and s[i] in " \t":
                i += 1
        if i >= n:
            return None
        c = s[i]
        i += 1
        flags = ""
        if c == "{":
            cmds.append((c, ""))
            continue
        if c in "}pPdDgGhHnNxz=F":
            pass
        elif c in "lqQL":
            while i < n and s[i] in " \t":
                i += 1
            while i < n and s[i] in "0123456789":
                i += 1
        elif c in "aicrRwWe":
            # text / file name / command up to the end of the line (\-newline continues)
            while i < n and s[i] != "\n":
                i += 2 if s[i] == "\\" else 1
            cmds.append((c, ""))
            continue
        elif c in "btT:":
            while i < n and s[i] not in ";\n":
                i += 1
        elif c in "sy":
            if i >= n or s[i] in "\n\\":
                return None
            i = _sed_delimited(s, i + 1, s[i], 2)
            if i < 0:
                return None
            if c == "s":
                while i < n and s[i] not in " \t;\n}#":
                    if s[i] == "w":
                        flags += "w"
                        i = _to_eol(s, i)
                        break
                    if s[i] not in "gpiImMe0123456789":
                        return None
                    flags += s[i]
                    i += 1
        else:
            return None
        cmds.append((c, flags))
        while i < n and s[i] in " \t":
            i += 1
        if i < n and s[i] not in ";\n}#":
            return None


def _sed_prints_only(script: str) -> bool:
    cmds = _sed_scan(script)
    if not cmds:
        return False
    return all(c in "pqQ={}" for c, _ in cmds) and any(c in "p=" for c, _ in cmds)


def _sed_edits_safely(script: str) -> bool:
    cmds = _sed_scan(script)
    if not cmds:
        return False
    return not any(c in "rRwWe" or "e" in f or "w" in f for c, f in cmds)


_SED_LONG = _names(
    "--regexp-extended --separate --unbuffered --null-data --posix --debug --sandbox "
    "--follow-symlinks"
)


def _sed_parse(args: list[_Word]) -> tuple[bool, bool, str, list[_Word]]:
    """(-n given, -i given, script, file operands)."""
    quiet = in_place = False
    scripts: list[str] = []
    operands: list[_Word] = []
    i, n, done = 0, len(args), False
    while i < n:
        word = args[i]
        text = word.text
        i += 1
        if done or not text.startswith("-") or text == "-":
            operands.append(word)
            continue
        if text == "--":
            done = True
            continue
        if text.startswith("--"):
            name, eq, value = text.partition("=")
            if name in ("--quiet", "--silent") and not eq:
                quiet = True
            elif name == "--in-place":
                in_place = True
            elif name == "--expression":
                if eq:
                    scripts.append(value)
                elif i < n:
                    scripts.append(args[i].text)
                    i += 1
                else:
                    _reject()
            elif name not in _SED_LONG or eq:
                _reject()
            continue
        j = 1
        while j < len(text):
            ch = text[j]
            if ch == "n":
                quiet = True
            elif ch in "Ersuz":
                pass
            elif ch == "i":  # the rest of the word is the backup suffix
                in_place = True
                if text == "-i" and i < n and args[i].text == "":
                    i += 1  # BSD: sed -i '' ...
                break
            elif ch == "e":
                if j + 1 < len(text):
                    scripts.append(text[j + 1 :])
                elif i < n:
                    scripts.append(args[i].text)
                    i += 1
                else:
                    _reject()
                break
            else:
                _reject()  # -f script-file, -l N, unknown
            j += 1
    if not scripts:
        if not operands:
            _reject()
        scripts.append(operands.pop(0).text)
    return quiet, in_place, "\n".join(scripts), operands


def _sed(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    quiet, in_place, script, files = _sed_parse(args)
    if in_place:
        if stdin is not None or stdout is not None or not files:
            _reject()
        if not _sed_edits_safely(script):
            _reject()
        return [_change(ctx.path(f), "edit") for f in files]
    if not quiet or stdout is not None or not _sed_prints_only(script):
        _reject()
    return _reads(ctx, files, stdin)


# -- searches

_LS_LONG = _names(
    "--all --almost-all --author --escape --directory --file-type --full-time "
    "--group-directories-first --human-readable --si --dereference "
    "--dereference-command-line --dereference-command-line-symlink-to-dir --inode "
    "--kibibytes --literal --numeric-uid-gid --hide-control-chars --show-control-chars "
    "--quote-name --reverse --recursive --size --context --zero --no-group"
)
_LS_LONG_ARGS = _names(
    "--ignore --hide --width --tabsize --sort --time --time-style --format "
    "--indicator-style --quoting-style --block-size"
)
_LS_LONG_OPTIONAL = frozenset({"--color", "--colour", "--hyperlink", "--classify"})


def _ls(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    _no_io(stdin, stdout)
    _, paths = _getopt(
        args,
        "aAbBcCdDfFgGhHiklLmnNopqQrRsStuUvxXZ1",
        "ITw",
        _LS_LONG,
        _LS_LONG_ARGS,
        _LS_LONG_OPTIONAL,
    )
    return _searches(ctx, paths, [None])


_TREE_LONG = _names(
    "--noreport --dirsfirst --filesfirst --gitignore --prune --du --si --matchdirs "
    "--ignore-case --inodes --device --nolinks --metafirst"
)
_TREE_LONG_ARGS = frozenset({"--charset", "--filelimit", "--timefmt", "--sort"})


def _tree(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    _no_io(stdin, stdout)
    opts, paths = _getopt(args, "adlfiqNQpugshDFvtcUrCnxASJX", "LIPHT", _TREE_LONG, _TREE_LONG_ARGS)
    patterns: list[str | None] = [_pattern(v) for k, v in opts if k == "-P" and v is not None]
    return _searches(ctx, paths, patterns or [None])


_FIND_NAME_TESTS = _names(
    "-name -iname -path -ipath -wholename -iwholename -regex -iregex -lname -ilname"
)
_FIND_ARG_TESTS = _names(
    "-type -xtype -maxdepth -mindepth -size -mtime -mmin -atime -amin -ctime -cmin "
    "-newer -anewer -cnewer -user -group -uid -gid -perm -links -inum -samefile "
    "-regextype -fstype -used -printf"
)
_FIND_NOARG = _names(
    "-print -print0 -empty -follow -xdev -mount -depth -readable -writable -executable "
    "-nouser -nogroup -true -false -ls -daystart -noleaf -ignore_readdir_race -quit"
)


def _find(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    _no_io(stdin, stdout)
    i, n = 0, len(args)
    while i < n and args[i].text in ("-H", "-L", "-P"):
        i += 1
    paths: list[_Word] = []
    while i < n and not args[i].text.startswith("-") and args[i].text not in ("(", ")", "!"):
        paths.append(args[i])
        i += 1
    # Expression: name tests and where they sit (negated? pruned? or-ed?).
    tests: list[list] = []  # [token index, pattern word, excluded]
    ors: list[int] = []
    group_neg = [False]
    group_start: list[int] = []
    negate = False
    last: tuple[int, int] | None = None  # range of tests of the previous primary
    while i < n:
        text = args[i].text
        if text in ("!", "-not"):
            negate = not negate
            i += 1
            continue
        if text == "(":
            group_neg.append(group_neg[-1] != negate)
            group_start.append(len(tests))
            negate = False
            i += 1
            continue
        if text == ")":
            if not group_start or negate:
                _reject()
            group_neg.pop()
            last = (group_start.pop(), len(tests))
            i += 1
            continue
        if text in ("-o", "-or", "-a", "-and", ","):
            if text in ("-o", "-or"):
                ors.append(i)
            i += 1
            continue
        excluded = group_neg[-1] != negate
        negate = False
        if text in _FIND_NAME_TESTS:
            if i + 1 >= n:
                _reject()
            tests.append([i, args[i + 1], excluded])
            last = (len(tests) - 1, len(tests))
            i += 2
        elif text == "-prune":
            if last is not None:
                for t in tests[last[0] : last[1]]:
                    t[2] = True
            last = None
            i += 1
        elif text in _FIND_ARG_TESTS:
            if i + 1 >= n:
                _reject()
            last = None
            i += 2
        elif text in _FIND_NOARG:
            last = None
            i += 1
        else:
            _reject()  # -exec, -delete, -fprint, -ok, unknown...
    if group_start or negate:
        _reject()
    positive = [(idx, _pattern(word)) for idx, word, excluded in tests if not excluded]
    for _, word, _ in tests:
        _pattern(word)  # exclusions must be literal too
    patterns: list[str | None]
    if len(positive) <= 1:
        patterns = [p for _, p in positive] or [None]
    elif all(
        any(a < o < b for o in ors) for (a, _), (b, _) in zip(positive, positive[1:], strict=False)
    ):
        patterns = [p for _, p in positive]  # -name A -o -name B: one search per pattern
    else:
        patterns = [None]  # several tests combined with AND: no single pattern
    return _searches(ctx, paths, patterns)


_GREP_LONG = _names(
    "--extended-regexp --fixed-strings --basic-regexp --perl-regexp --ignore-case "
    "--no-ignore-case --invert-match --word-regexp --line-regexp --count "
    "--files-with-matches --files-without-match --only-matching --quiet --silent "
    "--no-messages --byte-offset --with-filename --no-filename --line-number "
    "--initial-tab --null --null-data --text --recursive --dereference-recursive "
    "--line-buffered --binary"
)
_GREP_LONG_ARGS = _names(
    "--regexp --max-count --after-context --before-context --context --include "
    "--exclude --exclude-dir --label --binary-files --devices --directories"
)


def _grep(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    _no_io(stdin, stdout)
    opts, operands = _getopt(
        args,
        "abcEFGhHiIlLnoPqrRsTUvwxyzZ",
        "ABCDdem",
        _GREP_LONG,
        _GREP_LONG_ARGS,
        frozenset({"--color", "--colour"}),
        digits=True,
    )
    patterns: list[str | None] = []
    recursive = False
    for key, value in opts:
        if key in ("-e", "--regexp") and value is not None:
            patterns.append(_pattern(value))
        elif key in ("-r", "-R", "--recursive", "--dereference-recursive") or (
            key in ("-d", "--directories") and value is not None and value.text == "recurse"
        ):
            recursive = True
    if not patterns:
        if not operands:
            _reject()
        patterns.append(_pattern(operands.pop(0)))
    if not operands and not recursive:
        _reject()  # searches stdin
    return _searches(ctx, operands, patterns)


_RG_LONG = _names(
    "--hidden --no-ignore --no-ignore-vcs --no-ignore-dot --no-ignore-parent "
    "--no-ignore-global --no-ignore-exclude --no-ignore-files --ignore-case --smart-case "
    "--case-sensitive --fixed-strings --word-regexp --line-regexp --invert-match --count "
    "--count-matches --files-with-matches --files-without-match --files --line-number "
    "--no-line-number --no-heading --heading --with-filename --no-filename "
    "--only-matching --multiline --multiline-dotall --pcre2 --follow --json --vimgrep "
    "--column --no-column --no-messages --trim --stats --null --text --binary "
    "--unrestricted --pretty --quiet --byte-offset --sort-files --glob-case-insensitive "
    "--no-config --crlf --passthru --one-file-system --max-columns-preview "
    "--include-zero --no-unicode --auto-hybrid-regex --no-require-git"
)
_RG_LONG_ARGS = _names(
    "--after-context --before-context --context --regexp --glob --iglob --threads "
    "--max-count --max-columns --replace --type --type-not --encoding --max-depth "
    "--max-filesize --sort --sortr --color --colors --context-separator "
    "--field-context-separator --field-match-separator --path-separator --type-add "
    "--type-clear --ignore-file --engine --dfa-size-limit --regex-size-limit"
)


def _rg(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    _no_io(stdin, stdout)
    opts, operands = _getopt(
        args, "abcFHIiLlNnoPpqSsUuvwxz0.", "ABCdEegjMmrTt", _RG_LONG, _RG_LONG_ARGS
    )
    patterns: list[str | None] = []
    globs: list[str] = []
    files_mode = False
    for key, value in opts:
        if key in ("-e", "--regexp") and value is not None:
            patterns.append(_pattern(value))
        elif key in ("-g", "--glob", "--iglob") and value is not None:
            globs.append(value.text)
        elif key == "--files":
            files_mode = True
    if files_mode:  # rg --files [-g GLOB] [PATH...]: a file listing
        if patterns:
            _reject()
        positive = [g for g in globs if not g.startswith("!")]
        return _searches(ctx, operands, [positive[0] if len(positive) == 1 else None])
    if not patterns:
        if not operands:
            _reject()
        patterns.append(_pattern(operands.pop(0)))
    return _searches(ctx, operands, patterns)


_FD_LONG = _names(
    "--hidden --no-ignore --no-ignore-vcs --no-ignore-parent --unrestricted "
    "--case-sensitive --ignore-case --glob --regex --fixed-strings --absolute-path "
    "--list-details --follow --full-path --print0 --quiet --prune --show-errors "
    "--one-file-system --no-require-git"
)
_FD_LONG_ARGS = _names(
    "--extension --type --max-depth --min-depth --exact-depth --exclude --color --size "
    "--changed-within --changed-before --change-newer-than --change-older-than --newer "
    "--older --owner --max-results --threads --ignore-file --search-path "
    "--path-separator --format"
)


def _fd(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    _no_io(stdin, stdout)
    opts, operands = _getopt(
        args,
        "HIusigFalLp01q",
        "etdEcSoj",
        _FD_LONG,
        _FD_LONG_ARGS,
        frozenset({"--strip-cwd-prefix", "--hyperlink"}),
    )
    pattern = _pattern(operands.pop(0)) if operands else None
    extra = [v for k, v in opts if k == "--search-path" and v is not None]
    return _searches(ctx, extra + operands, [pattern])


# -- changes


def _simple_change(
    op: str,
    flags: str,
    with_arg: str = "",
    long_flags: frozenset[str] = frozenset(),
    long_args: frozenset[str] = frozenset(),
    *,
    glob: bool,
) -> Handler:
    def handler(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
        _no_io(stdin, stdout)
        _, files = _getopt(args, flags, with_arg, long_flags, long_args)
        if not files:
            _reject()
        return [_change(ctx.path(f, glob=glob), op) for f in files]

    return handler


def _unlink(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    _no_io(stdin, stdout)
    _, files = _getopt(args)
    if len(files) != 1:
        _reject()
    return [_change(ctx.path(files[0]), "delete")]


_MV_LONG = _names("--force --no-clobber --verbose --no-target-directory --strip-trailing-slashes")
_CP_LONG = _names(
    "--archive --force --no-clobber --recursive --verbose --no-target-directory "
    "--dereference --no-dereference --one-file-system --strip-trailing-slashes "
    "--remove-destination"
)


def _mover(
    op: str, flags: str, long_flags: frozenset[str], long_optional: frozenset[str]
) -> Handler:
    def handler(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
        _no_io(stdin, stdout)
        opts, operands = _getopt(
            args, flags, "t", long_flags, frozenset({"--target-directory"}), long_optional
        )
        keys = [k for k, _ in opts]
        targets = [v for k, v in opts if k in ("-t", "--target-directory") and v is not None]
        if len(targets) > 1:
            _reject()
        if targets:
            dest, sources = targets[0], operands
        elif len(operands) >= 2:
            dest, sources = operands[-1], operands[:-1]
        else:
            _reject()
        if not sources or (("-T" in keys or "--no-target-directory" in keys) and len(sources) != 1):
            _reject()
        to = ctx.path(dest, glob=False)
        return [_change(ctx.path(s), op, to) for s in sources]

    return handler


_TEE_LONG = frozenset({"--append", "--ignore-interrupts"})


def _tee(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    if stdout is not None or (stdin is not None and stdin[0] == "file"):
        _reject()
    opts, files = _getopt(args, "aip", "", _TEE_LONG, frozenset(), frozenset({"--output-error"}))
    if not files:
        _reject()
    op = "append" if any(k in ("-a", "--append") for k, _ in opts) else "write"
    return [_change(ctx.path(f, glob=False), op) for f in files]


def _echo(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    """echo / printf / : / true: a write with `> FILE`; no ops (only output) otherwise.

    Without a redirection they are file operations only as producers in `… | tee`.
    """
    if stdin is not None:
        _reject()
    return [_write_to(ctx, stdout)] if stdout is not None else []


def _printf(ctx: _Ctx, args: list[_Word], stdin: Stdin, stdout: Stdout) -> list[FileOp]:
    if not args or args[0].text.startswith("-v"):
        _reject()  # printf -v VAR assigns instead of printing
    return _echo(ctx, args, stdin, stdout)


_HANDLERS: dict[str, Handler] = {
    # reads
    "cat": _cat,
    "head": _head,
    "tail": _head,
    "nl": _reader("p", "bdfhilnsvw", _NL_LONG, _NL_LONG_ARGS),
    "less": _reader("NSRrXFiIMmnsEeKQ"),
    "more": _reader("d"),
    "bat": _reader("ApnPudfS", "lHrm", _BAT_LONG, _BAT_LONG_ARGS),
    "batcat": _reader("ApnPudfS", "lHrm", _BAT_LONG, _BAT_LONG_ARGS),
    "sed": _sed,
    # searches
    "ls": _ls,
    "tree": _tree,
    "find": _find,
    "grep": _grep,
    "egrep": _grep,
    "fgrep": _grep,
    "rg": _rg,
    "fd": _fd,
    "fdfind": _fd,
    # changes
    "rm": _simple_change(
        "delete", "frRvd", "", _names("--force --recursive --verbose --dir"), glob=True
    ),
    "rmdir": _simple_change(
        "delete",
        "pv",
        "",
        _names("--parents --verbose --ignore-fail-on-non-empty"),
        glob=True,
    ),
    "unlink": _unlink,
    "mkdir": _simple_change(
        "mkdir", "pv", "m", frozenset({"--parents", "--verbose"}), frozenset({"--mode"}), glob=False
    ),
    "touch": _simple_change(
        "touch",
        "acmhf",
        "dtr",
        frozenset({"--no-create", "--no-dereference"}),
        frozenset({"--date", "--reference", "--time"}),
        glob=False,
    ),
    "mv": _mover("move", "fnvuT", _MV_LONG, frozenset({"--update"})),
    "cp": _mover(
        "copy", "afnpPrRvuTLHdx", _CP_LONG, frozenset({"--update", "--preserve", "--reflink"})
    ),
    "tee": _tee,
    # producers: writes with `> FILE`, or the input of `| tee`
    "echo": _echo,
    "printf": _printf,
    ":": _echo,
    "true": _echo,
}

# First members of a pipeline whose output may be trimmed by `| head` etc.
_PIPE_SOURCES = _names("cat head tail nl bat batcat sed ls tree find grep egrep fgrep rg fd fdfind")
_SORT_LONG = _names(
    "--reverse --numeric-sort --unique --human-numeric-sort --version-sort --ignore-case "
    "--general-numeric-sort --month-sort --random-sort --stable --zero-terminated "
    "--dictionary-order --ignore-leading-blanks"
)
_SORT_LONG_ARGS = frozenset({"--key", "--field-separator", "--buffer-size", "--parallel"})


def _is_filter(name: str, args: list[_Word]) -> bool:
    """An output filter that only trims or reorders what the first member printed."""
    if name in ("head", "tail"):
        return not _head_files(args)
    if name == "sort":
        _, operands = _getopt(args, "bdfghiMnRrsuVz", "ktS", _SORT_LONG, _SORT_LONG_ARGS)
        return not operands
    if name == "sed":
        quiet, in_place, script, operands = _sed_parse(args)
        return quiet and not in_place and not operands and _sed_prints_only(script)
    return False


# ------------------------------------------------------------------------ driver


def _script(src: str, base: str | None, depth: int) -> list[FileOp]:
    if depth > _MAX_DEPTH:
        _reject()
    items = _parse(_Lexer(src).run())
    ctx = _Ctx(base, depth)
    has_or = any(conn == "||" for conn, _ in items)
    ops: list[FileOp] = []
    for _, pipe in items:
        if len(pipe) == 1:
            ops.extend(_command(ctx, pipe[0], has_or))
        else:
            ops.extend(_pipeline(ctx, pipe))
        if len(ops) > _MAX_OPS:
            _reject()
    return ops


def _member(cmd: _Cmd) -> tuple[str, list[_Word], Stdin, Stdout]:
    """A pipeline member: (name, args, stdin, stdout)."""
    name, args, _ = _unwrap(cmd.words)
    if name is None:
        _reject()
    if name not in _CONTENT_COMMANDS and any(a.dynamic for a in args):
        _reject()  # a $VAR argument: path, pattern or flag unknown
    stdin, stdout = _io(cmd.redirs)
    return name, args, stdin, stdout


def _command(ctx: _Ctx, cmd: _Cmd, has_or: bool) -> list[FileOp]:
    name, args, had_assignment = _unwrap(cmd.words)
    stdin, stdout = _io(cmd.redirs)
    if name is None:  # only redirections: `> file` truncates/creates it
        if had_assignment or stdin is not None or stdout is None:
            _reject()
        return [_write_to(ctx, stdout)]
    if name in ("cd", *_SHELLS):
        _no_io(stdin, stdout)
        if name != "cd":
            ops = _shell(ctx, args)
            if not ops:
                _reject()  # `bash -c 'cd src'`: no file operation
            return ops
        if has_or:
            _reject()  # `cd x || ...`: the directory of what follows is uncertain
        _cd(ctx, args)
        return []
    if name not in _CONTENT_COMMANDS and any(a.dynamic for a in args):
        _reject()  # a $VAR argument: path, pattern or flag unknown
    handler = _HANDLERS.get(name)
    if handler is None:
        _reject()
    ops = handler(ctx, args, stdin, stdout)
    if not ops:
        _reject()  # `echo hi`, `cat <<EOF` without a redirection: output, not a file op
    return ops


_KNOWN_HEADS = frozenset(
    {*_HANDLERS, "cd", *_SHELLS, *_CONTENT_COMMANDS, "command", "time", "env", "nice", "sort"}
)


def _cd(ctx: _Ctx, args: list[_Word]) -> None:
    if args and args[0].text == "--":
        args = args[1:]
    if len(args) != 1 or args[0].text.startswith("-"):
        _reject()  # `cd`, `cd -`, `cd -P dir`
    ctx.base = ctx.path(args[0], glob=False)


def _shell(ctx: _Ctx, args: list[_Word]) -> list[FileOp]:
    """bash -c 'SCRIPT' (and sh/zsh/dash, -l/-e/-u/-x, --login...): classify SCRIPT."""
    i, has_c = 0, False
    while i < len(args):
        text = args[i].text
        if text in ("--login", "--noprofile", "--norc"):
            i += 1
        elif text == "-o" and i + 1 < len(args) and args[i + 1].text in ("pipefail", "errexit"):
            i += 2
        elif _SHELL_FLAGS.fullmatch(text):
            if "c" in text:
                if has_c or text.count("c") > 1:
                    _reject()
                has_c = True
            i += 1
        else:
            break
    rest = args[i:]
    if not has_c or len(rest) != 1 or rest[0].dynamic:
        _reject()  # `bash script.sh`, `bash -c '...' arg0 ...`
    return _script(rest[0].text, ctx.base, ctx.depth + 1)


def _pipeline(ctx: _Ctx, pipe: list[_Cmd]) -> list[FileOp]:
    if len(pipe) > _MAX_PIPELINE:
        _reject()
    members = [_member(cmd) for cmd in pipe]
    name, args, stdin, stdout = members[0]
    if stdout is not None:
        _reject()
    for _, _, member_in, member_out in members[1:]:
        if member_in is not None or member_out is not None:
            _reject()
    last_name, last_args = members[-1][0], members[-1][1]
    if last_name == "tee":  # producer | tee FILE...
        if len(members) != 2 or name not in ("echo", "printf", "cat"):
            _reject()
        first = _HANDLERS[name](ctx, args, stdin, None)
        return first + _tee(ctx, last_args, None, None)
    if name not in _PIPE_SOURCES:
        _reject()
    first = _HANDLERS[name](ctx, args, stdin, None)
    if not first or any(op.kind == "write" for op in first):
        _reject()
    for member_name, member_args, _, _ in members[1:]:
        if not _is_filter(member_name, member_args):
            _reject()
    return first

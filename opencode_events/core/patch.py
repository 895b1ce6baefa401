"""The files an ``apply_patch`` call changed: its ``metadata.files``, else its patch text.

OpenCode 1.18.33 records what the tool did in the call's ``metadata.files``
(``[{filePath, relativePath, type: add|update|move|delete, movePath?, …}]``, absolute
paths); ``recorded_files`` reads that. A call that failed has none, so
``patched_files`` reads the patch as OpenCode's own ``parsePatch`` does
(``packages/opencode/src/patch/index.ts``, the same code in the 1.18.33 binary):

* the text is trimmed and a ``cat <<'EOF' … EOF`` heredoc around it is stripped;
* it is split on ``\\n`` only; the first line that trims to ``*** Begin Patch`` and the
  first that trims to ``*** End Patch`` bound it, and without both (in that order) OpenCode
  refuses the patch: no file;
* between them, a header is a line that *starts* with ``*** Add File:``, ``*** Delete
  File:`` or ``*** Update File:`` (not trimmed: an indented ``*** Delete File: x`` inside a
  hunk is context) followed by a path that trims to something; ``*** Move to:`` on the
  very next line makes the update a move;
* an add's ``+`` lines and an update's chunks run until the next line starting with
  ``***``, so nothing inside them is read as a header.

``relative_to`` resolves a patch path against the session directory as OpenCode's
``path.resolve`` does, so both readings give the absolute paths ``write``/``edit`` carry.
Never raises::

    >>> patched_files("*** Begin Patch\\n*** Delete File: a.txt\\n*** End Patch", "/w")
    [PatchedFile(op='delete', path='/w/a.txt', to=None)]
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, NamedTuple

import msgspec

__all__ = ["PatchedFile", "patched_files", "recorded_files"]

_ADD = "*** Add File:"
_DELETE = "*** Delete File:"
_UPDATE = "*** Update File:"
_MOVE = "*** Move to:"
_BEGIN = "*** Begin Patch"
_END = "*** End Patch"
_OPS = frozenset({"add", "update", "move", "delete"})

# JavaScript's String.prototype.trim and \s: its white space and line terminators
# (Python's str.strip differs: it strips \x1c-\x1f, keeps \ufeff).
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_TRIM = re.compile(f"^[{_JS_SPACE}]+|[{_JS_SPACE}]+$")
# stripHeredoc: /^(?:cat\s+)?<<['"]?(\w+)['"]?\s*\n([\s\S]*?)\n\1\s*$/ (\w is ASCII in JS)
_HEREDOC = re.compile(
    f"(?:cat[{_JS_SPACE}]+)?<<['\"]?([A-Za-z0-9_]+)['\"]?[{_JS_SPACE}]*\\n(.*?)\\n\\1[{_JS_SPACE}]*",
    re.DOTALL,
)


class PatchedFile(NamedTuple):
    op: str  # "add" | "update" | "delete" | "move"
    path: str
    to: str | None = None


def _trim(text: str) -> str:
    return _JS_TRIM.sub("", text)


def _strip_heredoc(text: str) -> str:
    match = _HEREDOC.fullmatch(text)
    return match.group(2) if match else text


def _resolve(path: str, directory: str | None) -> str:
    """``path.resolve(directory, path)`` for a POSIX directory; as written without one."""
    if directory is None or not directory.startswith("/"):
        return path
    return posixpath.normpath(posixpath.join(directory, path)).replace("//", "/", 1)


def _header(line: str, marker: str) -> str | None:
    if not line.startswith(marker):
        return None
    path = _trim(line[len(marker) :])
    return path or None


def patched_files(patch_text: str, relative_to: str | None = None) -> list[PatchedFile]:
    """The files the patch names, in order, as OpenCode parses it; paths resolved against
    ``relative_to`` (the session directory) when it is given. [] when OpenCode would refuse
    the patch (no envelope) or it names no file."""
    lines = _strip_heredoc(_trim(patch_text)).split("\n")
    trimmed = [_trim(line) for line in lines]
    try:
        begin, end = trimmed.index(_BEGIN), trimmed.index(_END)
    except ValueError:
        return []
    if begin >= end:
        return []
    files: list[PatchedFile] = []
    i = begin + 1
    count = len(lines)
    while i < end:
        line = lines[i]
        if (path := _header(line, _ADD)) is not None:
            files.append(PatchedFile("add", _resolve(path, relative_to)))
            i += 1
        elif (path := _header(line, _DELETE)) is not None:
            files.append(PatchedFile("delete", _resolve(path, relative_to)))
            i += 1
            continue  # a delete has no body
        elif (path := _header(line, _UPDATE)) is not None:
            i += 1
            move = None
            if i < count and lines[i].startswith(_MOVE):
                move = _trim(lines[i][len(_MOVE) :]) or None  # an empty target: no move
                i += 1
            if move is None:
                files.append(PatchedFile("update", _resolve(path, relative_to)))
            else:
                files.append(
                    PatchedFile("move", _resolve(path, relative_to), _resolve(move, relative_to))
                )
        else:
            i += 1
            continue
        while i < count and not lines[i].startswith("***"):  # the body: + lines, chunks
            i += 1
    return files


class _RecordedFile(msgspec.Struct):
    filePath: Any = None  # noqa: N815 - OpenCode's spelling
    type: Any = None
    movePath: Any = None  # noqa: N815


_RECORDED = msgspec.json.Decoder(list[_RecordedFile])


def recorded_files(files: Any) -> list[PatchedFile] | None:
    """The ``metadata.files`` OpenCode recorded (JSON bytes), or None when there is no
    usable list: every entry needs a ``filePath`` and a known ``type``, a move its
    ``movePath``."""
    if not files:
        return None
    try:
        entries = _RECORDED.decode(files)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None
    out: list[PatchedFile] = []
    for entry in entries:
        path, op, to = entry.filePath, entry.type, entry.movePath
        # a type that is no string (a list, an object) is no type: and cannot be hashed
        if not (isinstance(path, str) and path and isinstance(op, str) and op in _OPS):
            return None
        if op == "move":
            if not (isinstance(to, str) and to):
                return None
            out.append(PatchedFile("move", path, to))
        else:
            out.append(PatchedFile(op, path))
    return out or None

"""The files an ``apply_patch`` call names, read from its ``*** … File:`` markers.

Follows OpenCode 1.18.33's ``parsePatch``: lines are compared trimmed, headers match by
prefix, ``*** Move to:`` right after an ``*** Update File:`` turns that update into a move.
Only the headers are read; hunks are skipped. Never raises.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["PatchedFile", "patched_files"]

_ADD = "*** Add File:"
_DELETE = "*** Delete File:"
_UPDATE = "*** Update File:"
_MOVE = "*** Move to:"


class PatchedFile(NamedTuple):
    op: str  # "add" | "update" | "delete" | "move"
    path: str
    to: str | None = None


def patched_files(patch_text: str) -> list[PatchedFile]:
    """Each file header of the patch in order; an empty list when there is none."""
    files: list[PatchedFile] = []
    after_update = False
    for raw_line in patch_text.splitlines():
        line = raw_line.strip()
        follows_update, after_update = after_update, False
        if not line.startswith("*** "):
            continue
        if line.startswith(_ADD):
            files.append(PatchedFile("add", line[len(_ADD) :].strip()))
        elif line.startswith(_DELETE):
            files.append(PatchedFile("delete", line[len(_DELETE) :].strip()))
        elif line.startswith(_UPDATE):
            files.append(PatchedFile("update", line[len(_UPDATE) :].strip()))
            after_update = True
        elif line.startswith(_MOVE) and follows_update:
            files[-1] = PatchedFile("move", files[-1].path, line[len(_MOVE) :].strip())
    return files

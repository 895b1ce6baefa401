"""apply_patch read as OpenCode 1.18.33's own ``parsePatch`` reads it, and its
``metadata.files`` preferred when the call recorded them."""

from __future__ import annotations

import json

import pytest

from opencode_events.core.patch import PatchedFile, patched_files, recorded_files


def patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"])


A, U, D, M = "add", "update", "delete", "move"

PARSE_CASES = [
    # (id, patch text, expected [(op, path, to)])
    (
        "add update delete",
        patch(
            "*** Add File: a", "+x", "*** Update File: b", "@@", "-1", "+2", "*** Delete File: c"
        ),
        [(A, "a"), (U, "b"), (D, "c")],
    ),
    (
        "move right after the update",
        patch("*** Update File: a", "*** Move to: b/c", "@@", "-x"),
        [(M, "a", "b/c")],
    ),
    (
        "a move that is not on the next line is nothing",
        patch("*** Update File: a", "@@", "*** Move to: b"),
        [(U, "a")],
    ),
    (
        "a move with no target stays an update",
        patch("*** Update File: a", "*** Move to:  "),
        [(U, "a")],
    ),
    ("no envelope: OpenCode refuses the patch", "*** Add File: a\n+x", []),
    ("begin without end", "*** Begin Patch\n*** Add File: a", []),
    ("end before begin", "*** End Patch\n*** Begin Patch\n*** Add File: a", []),
    (
        "markers compared trimmed",
        "  *** Begin Patch  \n*** Add File: a\n\t*** End Patch ",
        [(A, "a")],
    ),
    (
        "headers are not trimmed: an indented delete inside a hunk is context",
        patch("*** Update File: a", "@@", " *** Delete File: x", "-y"),
        [(U, "a")],
    ),
    (
        "an indented header outside a hunk is nothing",
        patch("  *** Add File: a", "*** Delete File: b"),
        [(D, "b")],
    ),
    (
        "an add's + lines are its content",
        patch("*** Add File: a", "+*** Delete File: x"),
        [(A, "a")],
    ),
    (
        "a header with no path is skipped",
        patch("*** Add File:   ", "*** Delete File: b"),
        [(D, "b")],
    ),
    ("paths are trimmed", patch("*** Delete File:   spaced name.txt  "), [(D, "spaced name.txt")]),
    (
        "after End Patch nothing counts",
        patch("*** Add File: a") + "\n*** Delete File: b",
        [(A, "a")],
    ),
    (
        "before Begin Patch nothing counts",
        "*** Delete File: z\n" + patch("*** Add File: a"),
        [(A, "a")],
    ),
    ("CRLF lines", patch("*** Add File: a", "+x").replace("\n", "\r\n"), [(A, "a")]),
    (
        "a heredoc around it is stripped",
        "cat <<'EOF'\n" + patch("*** Delete File: a") + "\nEOF",
        [(D, "a")],
    ),
    (
        "a heredoc without cat",
        '<<"PATCH"\n' + patch("*** Delete File: a") + "\nPATCH\n",
        [(D, "a")],
    ),
    ("an empty patch", patch(), []),
    (
        "a delete is followed by nothing of its own",
        patch("*** Delete File: a", "+x", "*** Add File: b"),
        [(D, "a"), (A, "b")],
    ),
    (
        "End of File ends an update's chunks",
        patch("*** Update File: a", "@@", "-x", "*** End of File", "*** Delete File: b"),
        [(U, "a"), (D, "b")],
    ),
]


@pytest.mark.parametrize(
    ("text", "expected"), [c[1:] for c in PARSE_CASES], ids=[c[0] for c in PARSE_CASES]
)
def test_parsed_as_opencode_parses_it(text: str, expected: list[tuple[str, ...]]) -> None:
    assert patched_files(text) == [PatchedFile(*e) for e in expected]


@pytest.mark.parametrize(
    ("path", "directory", "resolved"),
    [
        ("a.txt", "/w", "/w/a.txt"),
        ("src/../b.txt", "/w", "/w/b.txt"),
        ("/abs/c.txt", "/w", "/abs/c.txt"),
        ("./d/", "/w/", "/w/d"),
        ("a.txt", None, "a.txt"),  # no directory known (a run stream): as written
        ("a.txt", "relative/dir", "a.txt"),
    ],
)
def test_paths_resolved_against_the_session_directory(path, directory, resolved) -> None:
    (file,) = patched_files(patch(f"*** Delete File: {path}"), directory)
    assert file.path == resolved


def test_a_move_target_is_resolved_too() -> None:
    (file,) = patched_files(patch("*** Update File: a", "*** Move to: b/c"), "/w")
    assert file == PatchedFile("move", "/w/a", "/w/b/c")


def _files(*entries: dict) -> bytes:
    return json.dumps(list(entries)).encode()


RECORDED_CASES = [
    (
        "each kind",
        _files(
            {"filePath": "/w/a", "relativePath": "a", "type": "add", "patch": "…"},
            {"filePath": "/w/b", "relativePath": "b", "type": "update"},
            {"filePath": "/w/c", "relativePath": "d", "type": "move", "movePath": "/w/d"},
            {"filePath": "/w/e", "relativePath": "e", "type": "delete"},
        ),
        [(A, "/w/a"), (U, "/w/b"), (M, "/w/c", "/w/d"), (D, "/w/e")],
    ),
    ("nothing recorded", b"", None),
    ("an empty list", b"[]", None),
    ("not a list", b'{"filePath": "/w/a"}', None),
    ("an unknown type", _files({"filePath": "/w/a", "type": "rename"}), None),
    ("no path", _files({"type": "add"}), None),
    ("a move without its target", _files({"filePath": "/w/a", "type": "move"}), None),
    ("a type that is a list", _files({"filePath": "/w/a", "type": []}), None),  # no crash
    ("a type that is an object", _files({"filePath": "/w/a", "type": {"x": 1}}), None),
]


@pytest.mark.parametrize(
    ("files", "expected"), [c[1:] for c in RECORDED_CASES], ids=[c[0] for c in RECORDED_CASES]
)
def test_recorded_files(files: bytes, expected) -> None:
    found = recorded_files(files)
    assert found == (None if expected is None else [PatchedFile(*e) for e in expected])

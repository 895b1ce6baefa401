"""Tests for opencode_events.core.bashcmd -- the rules of docs/bash.md.

Results are compared in the doc's notation (``render``): ``read P``, ``search P for X``,
``move A → B``, ... joined by ``; ``, and ``None``. ``test_doc_rows_are_in_the_table``
keeps docs/bash.md and CASES in step: every example row of the doc must appear here
with the same result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from opencode_events.core import bashcmd
from opencode_events.core.bashcmd import MAX_COMMAND_CHARS, FileOp, classify_bash

DOC = Path(__file__).resolve().parents[1] / "docs" / "bash.md"
WRITE_OPS = {"write", "append", "delete", "move", "copy", "mkdir", "touch", "edit"}


def render(ops: tuple[FileOp, ...] | None) -> str:
    if ops is None:
        return "None"
    out = []
    for op in ops:
        if op.kind == "read":
            out.append(f"read {op.path}")
        elif op.kind == "search":
            out.append(
                f"search {op.path}" + (f" for {op.pattern}" if op.pattern is not None else "")
            )
        elif op.op in ("move", "copy"):
            out.append(f"{op.op} {op.path} → {op.to}")
        else:
            out.append(f"{op.op} {op.path}")
    return "; ".join(out)


def case(case_id: str, command: str, expected: str, workdir: str | None = None):
    return pytest.param(command, workdir, expected, id=case_id)


CASES = [
    # ------------------------------------------------------------------ reads
    case("cat", "cat README.md", "read README.md"),
    case("cat-several-flags", "cat -n a.py b.py", "read a.py; read b.py"),
    case("cat-stdin-file", "cat < a.txt", "read a.txt"),
    case("cat-copy", "cat a b > c", "read a; read b; write c"),
    case("cat-append-copy", "cat a >> c", "read a; append c"),
    case("cat-long-flag", "cat --number a", "read a"),
    case("head-n", "head -n 50 src/app.py", "read src/app.py"),
    case("head-n-attached", "head -n5 a", "read a"),
    case("head-lines-eq", "head --lines=5 a", "read a"),
    case("tail-num", "tail -20 log.txt", "read log.txt"),
    case("tail-plus", "tail -n +100 a.py", "read a.py"),
    case("head-c-several", "head -c 100 a b", "read a; read b"),
    case("head-negative", "head -n -5 a", "read a"),
    case("sed-n-range", "sed -n '1,80p' a.py", "read a.py"),
    case("sed-n-regex-range", "sed -n '/def main/,/^$/p' a.py", "read a.py"),
    case("sed-n-e-e", "sed -n -e '1p' -e '$=' a.py", "read a.py"),
    case("sed-n-unquoted", "sed -n 10p a", "read a"),
    case("sed-n-quit", "sed -n '1,5p;10q' a", "read a"),
    case("sed-n-block", "sed -n '/x/{p;q}' a", "read a"),
    case("sed-ne-cluster", "sed -ne '5,9p' a", "read a"),
    case("sed-quiet-long", "sed --quiet '2p' a", "read a"),
    case("sed-n-stdin-file", "sed -n 1p < a", "read a"),
    case("nl", "nl -ba a.py", "read a.py"),
    case("bat", "bat --style=plain -n a.py", "read a.py"),
    case("batcat-range", "batcat -r 10:20 a.py", "read a.py"),
    case("less", "less -N a.py", "read a.py"),
    case("more", "more a.py", "read a.py"),
    # reads: rejections
    case("cat-stdin", "cat", "None"),
    case("cat-dash", "cat -", "None"),
    case("cat-empty-path", "cat ''", "None"),
    case("cat-unknown-flag", "cat --wat a", "None"),
    case("tail-follow", "tail -f log.txt", "None"),
    case("tail-follow-cluster", "tail -5f log.txt", "None"),
    case("tail-obsolete-plus", "tail +5 a", "None"),
    case("head-bad-count", "head -n x a", "None"),
    case("sed-no-n", "sed 's/a/b/' a.py", "None"),
    case("sed-n-subst", "sed -n 's/a/b/p' a.py", "None"),
    case("sed-n-write", "sed -n 'w out.txt' a.py", "None"),
    case("sed-n-no-print", "sed -n '/x/q' a", "None"),
    case("sed-n-read-cmd", "sed -n '1r other' a", "None"),
    case("sed-script-file", "sed -n -f s.sed a", "None"),
    case("sed-n-no-file", "sed -n 1p", "None"),
    case("sed-garbage-script", "sed -n 'p;;x!!' a", "None"),
    case("wc", "wc -l a.py", "None"),
    case("less-plus", "less +G a.py", "None"),
    case("device", "head -c 16 /dev/urandom", "None"),
    case("heredoc-into-head", "head -5 <<'EOF'\nx\nEOF", "None"),
    case("cat-files-and-stdin", "cat a <<< x", "None"),
    # ------------------------------------------------------------------ searches
    case("ls", "ls", "search ."),
    case("ls-paths", "ls -la src tests", "search src; search tests"),
    case("ls-glob", "ls *.py", "search *.py"),
    case("ls-color", "ls --color=auto -1 src", "search src"),
    case("ls-ignore-arg", "ls -I '*.pyc' src", "search src"),
    case("tree", "tree -L 2 src", "search src"),
    case("tree-pattern", "tree -P '*.py'", "search . for *.py"),
    case("tree-ignore", "tree -I 'node_modules|dist' -a", "search ."),
    case("find-name", "find . -name '*.py'", "search . for *.py"),
    case("find-no-name", "find src -type f -maxdepth 2", "search src"),
    case("find-no-path", "find -iname 'readme*'", "search . for readme*"),
    case(
        "find-not-path",
        "find src -name '*.ts' -not -path '*/node_modules/*'",
        "search src for *.ts",
    ),
    case("find-bang", "find . -type f ! -name '*.pyc'", "search ."),
    case(
        "find-prune",
        "find . -path ./node_modules -prune -o -name '*.js' -print",
        "search . for *.js",
    ),
    case(
        "find-prune-group",
        r"find . \( -name .git -o -name node_modules \) -prune -o -type f -name '*.md' -print",
        "search . for *.md",
    ),
    case(
        "find-or", "find . -name '*.py' -o -name '*.pyi'", "search . for *.py; search . for *.pyi"
    ),
    case("find-and", "find . -path '*/tests/*' -name '*.py'", "search ."),
    case("find-paths", "find src tests -name '*.py'", "search src for *.py; search tests for *.py"),
    case("find-L", "find -L . -name x", "search . for x"),
    case("find-escaped-glob", r"find . -name \*.py", "search . for *.py"),
    case("grep-files", "grep TODO a.py b.py", "search a.py for TODO; search b.py for TODO"),
    case("grep-rn", "grep -rn 'def main' src", "search src for def main"),
    case("grep-r-default", "grep -r --include='*.py' TODO", "search . for TODO"),
    case("grep-include-separate", "grep -rn --include '*.py' TODO .", "search . for TODO"),
    case("grep-e-e", "grep -rn -e foo -e bar .", "search . for foo; search . for bar"),
    case("egrep", "egrep -n -3 'get|set' api.py", "search api.py for get|set"),
    case("grep-flags-after", "grep foo src -rn", "search src for foo"),
    case("grep-context", "grep -A 3 -B2 foo a", "search a for foo"),
    case("grep-d-recurse", "grep -d recurse foo", "search . for foo"),
    case("grep-e-attached", "grep -efoo a", "search a for foo"),
    case("grep-regexp-eq", "grep --regexp=-x a", "search a for -x"),
    case("grep-dashdash", "grep -- -v a", "search a for -v"),
    case("grep-empty-pattern", "grep -c '' a", "search a for "),
    case("rg", "rg 'fn main'", "search . for fn main"),
    case(
        "rg-type-paths",
        "rg -n -t py import src tests",
        "search src for import; search tests for import",
    ),
    case("rg-glob-not-pattern", "rg -g '!vendor' foo", "search . for foo"),
    case("rg-files-glob", "rg --files -g '*.md'", "search . for *.md"),
    case("rg-files-path", "rg --files src", "search src"),
    case("rg-uu", "rg -uu -i foo", "search . for foo"),
    case("fd", "fd test src", "search src for test"),
    case("fd-ext", "fd -e py", "search ."),
    case("fdfind", "fdfind -H -t f . src", "search src for ."),
    # searches: rejections
    case("grep-stdin", "grep foo", "None"),
    case("grep-nothing", "grep", "None"),
    case("find-delete", "find . -name '*.pyc' -delete", "None"),
    case("find-exec", "find . -name '*.py' -exec wc -l {} +", "None"),
    case("find-unquoted-glob", "find . -name *.py", "None"),
    case("find-fprint", "find . -fprint out", "None"),
    case("find-unbalanced", r"find . \( -name x", "None"),
    case("grep-include-unquoted-separate", "grep -rn --include *.py TODO .", "None"),
    case("grep-pattern-unquoted-glob", "grep foo* a", "None"),
    case("grep-pattern-file", "grep -f pats.txt a.py", "None"),
    case("grep-var-pattern", 'grep "$PAT" a', "None"),
    case("rg-pre", "rg --pre cat foo", "None"),
    case("rg-glob-unquoted", "rg -g *.py foo", "None"),
    case("rg-type-list", "rg --type-list", "None"),
    case("fd-exec", "fd -e pyc -x rm", "None"),
    case("fd-base-directory", "fd --base-directory /x foo", "None"),
    case("tree-output", "tree -o out.txt", "None"),
    case("ls-redirect", "ls > files.txt", "None"),
    case("ls-unknown-long", "ls --wat", "None"),
    # ------------------------------------------------------------------ changes
    case("rm", "rm -rf build dist", "delete build; delete dist"),
    case("rm-glob", "rm *.pyc", "delete *.pyc"),
    case("rm-dashdash", "rm -- -weird", "delete -weird"),
    case("rmdir", "rmdir empty", "delete empty"),
    case("unlink", "unlink a", "delete a"),
    case("mv", "mv old.py new.py", "move old.py → new.py"),
    case("mv-several", "mv a.py b.py src/", "move a.py → src/; move b.py → src/"),
    case("mv-t", "mv -t dest a b", "move a → dest; move b → dest"),
    case("mv-glob-source", "mv a*.txt dir", "move a*.txt → dir"),
    case("cp", "cp -r src backup", "copy src → backup"),
    case("cp-archive", "cp -a --no-clobber a b", "copy a → b"),
    case("mkdir", "mkdir -p src/utils", "mkdir src/utils"),
    case("mkdir-braces", "mkdir -p src/{api,models}", "mkdir src/api; mkdir src/models"),
    case("mkdir-nested-braces", "mkdir {a,b/{c,d}}", "mkdir a; mkdir b/c; mkdir b/d"),
    case("mkdir-mode", "mkdir -m 755 bin", "mkdir bin"),
    case("touch", "touch a.py b.py", "touch a.py; touch b.py"),
    case("sed-i", "sed -i 's/foo/bar/g' a.py", "edit a.py"),
    case("sed-i-suffix-e", "sed -i.bak -e 's/a/b/' x.py y.py", "edit x.py; edit y.py"),
    case("sed-i-bsd", "sed -i '' 's/a/b/' a.py", "edit a.py"),
    case("sed-ie-gnu-suffix", "sed -ie 's/a/b/' a.py", "edit a.py"),
    case("sed-in-place-long", "sed --in-place -E 's/(a)/\\1b/' a.py", "edit a.py"),
    case("sed-i-delete-lines", "sed -i '/^#/d;3a\\\nnew line' a.py", "edit a.py"),
    case("sed-i-glob", "sed -i 's/a/b/' *.py", "edit *.py"),
    case("tee-heredoc", "tee out.txt <<'EOF'\nhello\nEOF", "write out.txt"),
    case("tee-pipe-append", "echo done | tee -a log.txt", "append log.txt"),
    case("cat-tee", "cat a | tee b c", "read a; write b; write c"),
    case("tee-devnull-stdout", "printf 'x' | tee f > /dev/null", "write f"),
    case("tee-alone", "tee f", "write f"),
    case("echo-write", "echo 'x = 1' > a.py", "write a.py"),
    case("echo-append-var", 'echo "$PATH" >> env.txt', "append env.txt"),
    case("printf-write", "printf '%s\\n' a b > list.txt", "write list.txt"),
    case(
        "heredoc-write",
        "cat > app.py <<'EOF'\nimport os\nprint($x)\nEOF",
        "write app.py",
    ),
    case("heredoc-after-op", "cat <<EOF >> notes.md\n- item\nEOF", "append notes.md"),
    case("heredoc-dash", "cat <<-END > t.txt\n\ttext\n\tEND", "write t.txt"),
    case("heredoc-double-quoted", 'cat > f <<"EOF"\n`x` $(y)\nEOF', "write f"),
    case("heredoc-backslash-delim", "cat > f <<\\EOF\n$(y)\nEOF", "write f"),
    case("heredoc-space-delim", "cat > f << 'EOF'\nx\nEOF\n", "write f"),
    case("heredoc-no-final-newline", "cat > f <<'EOF'\nx\nEOF", "write f"),
    case("heredoc-empty", "cat > f <<'EOF'\nEOF", "write f"),
    case(
        "heredoc-body-looks-like-commands", "cat > s.sh <<'EOF'\nrm -rf /\n) ; |\nEOF", "write s.sh"
    ),
    case("herestring", "cat > f.txt <<< 'text'", "write f.txt"),
    case("clobber", "echo x >| f.txt", "write f.txt"),
    case("amp-redirect", "echo x &> f.txt", "write f.txt"),
    case("truncate-colon", ": > log.txt", "write log.txt"),
    case("truncate-bare", "> log.txt", "write log.txt"),
    case("echo-devnull", "echo x > /dev/null", "None"),
    case("escaped-subst-in-heredoc", "cat > f <<EOF\n\\$(not run) $HOME\nEOF", "write f"),
    # changes: rejections
    case("pytest-redirect", "pytest > log.txt", "None"),
    case("python-redirect", "python gen.py > out.py", "None"),
    case("stderr-file", "echo x 2> err.log", "None"),
    case("var-target", "echo hi > $OUT", "None"),
    case("touch-glob", "touch *.py", "None"),
    case("mv-glob-dest", "mv a.txt b*", "None"),
    case("redirect-braces", "echo x > {a,b}.txt", "None"),
    case("two-stdout-redirects", "echo x > a > b", "None"),
    case("rm-interactive", "rm -i a.py", "None"),
    case("rm-nothing", "rm -f", "None"),
    case("cp-link", "cp -l a b", "None"),
    case("cp-one-operand", "cp a", "None"),
    case("mv-T-several", "mv -T a b c", "None"),
    case("sed-i-w", "sed -i 's/a/b/w out' f.py", "None"),
    case("sed-i-e-flag", "sed -i 's/x/date/e' f.py", "None"),
    case("sed-i-e-cmd", "sed -i '1e date' f.py", "None"),
    case("sed-i-no-file", "sed -i 's/a/b/'", "None"),
    case("printf-v", "printf -v x '%s' hi", "None"),
    case("sudo-tee", "echo x | sudo tee /etc/f", "None"),
    case("tee-devnull", "echo x | tee /dev/null", "None"),
    case("tee-glob", "echo x | tee *.txt", "None"),
    case("heredoc-subst", "cat > f <<EOF\nbuilt $(date)\nEOF", "None"),
    case("heredoc-backquote", "cat > README.md <<EOF\nrun `make`\nEOF", "None"),
    case("heredoc-unterminated", "cat > f <<'EOF'\nno end", "None"),
    case("heredoc-var-delim", "cat > f <<$X\nx\n$X", "None"),
    case("two-heredocs-one-cmd", "cat <<A <<B > f\na\nA\nb\nB", "None"),
    case("heredoc-into-python", "python3 <<'EOF'\nprint(1)\nEOF", "None"),
    case("colon-heredoc", ": <<'EOF'\ncomment\nEOF", "None"),
    case("cat-devnull", "cat /dev/null > f", "None"),
    case("assign-redirect", "X=1 > f", "None"),
    # ------------------------------------------------------------------ paths
    case("as-written", "cat ./a.py", "read ./a.py"),
    case("workdir", "cat a.py", "read /repo/a.py", "/repo"),
    case("workdir-cd", "cd src && cat ../b.py", "read /repo/b.py", "/repo"),
    case("workdir-absolute", "cat /etc/hosts", "read /etc/hosts", "/repo"),
    case("workdir-dot", "ls", "search /repo", "/repo"),
    case("workdir-slash", "mv a.py lib/", "move /repo/a.py → /repo/lib/", "/repo"),
    case("workdir-relative", "cat a", "read sub/a", "sub/"),
    case("tilde", "cat ~/.bashrc", "read ~/.bashrc"),
    case("tilde-cd", "cd ~ && cat .bashrc", "read ~/.bashrc", "/repo"),
    case("braces", "cat src/{a,b}.py", "read src/a.py; read src/b.py"),
    case("braces-literal", "cat {x}.py", "read {x}.py"),
    case("quoted-braces", "cat '{a,b}'", "read {a,b}"),
    case("quoted-glob", "rm 'a*'", "delete a*"),
    case("var", "cat $FILE", "None"),
    case("var-braced", 'cat "${DIR}/a.py"', "None"),
    case("subst", 'cat "$(ls)"', "None"),
    case("backquote", "cat `ls`", "None"),
    case("sequence", "cat {1..3}.txt", "None"),
    case("quoted-tilde", 'cat "~/x"', "None"),
    case("ansi-c", "cat $'a\\tb'", "None"),
    case("locale-string", 'cat $"a"', "None"),
    case("special-param", "cat $1", "None"),
    case("crlf", "cat a.txt\r", "None"),
    case("control-char", "cat $'\\x01'", "None"),
    case("literal-dollar", "cat 'a$b' \"c$\"", "read a$b; read c$"),
    case("backslash-in-dq", 'cat "a\\b"', "read a\\b"),
    case("escaped-space", "cat my\\ file.txt", "read my file.txt"),
    case("mixed-quotes", "cat 'a b'\"c\"d", "read a bcd"),
    case("unicode", "cat résumé.md", "read résumé.md"),
    # ------------------------------------------------------------------ wrappers
    case("assignments", "LC_ALL=C grep -rn x .", "search . for x"),
    case("assignment-var-value", "FOO=$HOME cat a", "read a"),
    case("env", "env FOO=1 cat a", "read a"),
    case("time", "time cat a", "read a"),
    case("nice", "nice -n 10 cat a", "read a"),
    case("command", "command ls src", "search src"),
    case("bin-prefix", "/bin/cat a", "read a"),
    case("alias-bypass", "\\cat a", "read a"),
    case("bash-c", "bash -c 'cat a'", "read a"),
    case("bash-lc", 'bash -lc "cd src && ls"', "search src"),
    case("sh-c-outer-cd", "cd web && sh -c 'rm -rf dist'", "delete web/dist"),
    case("env-bash-c", "/usr/bin/env bash -c 'cat a'", "read a"),
    case("bash-c-nested", "bash -c \"sh -c 'cat a'\"", "read a"),
    case("bash-c-pipefail", "bash -e -o pipefail -c 'cat a | head'", "read a"),
    case("bash-c-heredoc", "bash -c \"cat > f <<'EOF'\nx\nEOF\"", "write f"),
    # wrappers: rejections
    case("sudo", "sudo cat /etc/shadow", "None"),
    case("xargs", "xargs cat", "None"),
    case("timeout", "timeout 5 cat a", "None"),
    case("bash-script", "bash script.sh", "None"),
    case("bash-var-script", 'bash -c "$CMD"', "None"),
    case("bash-extra-args", "bash -c 'cat $0' a.txt", "None"),
    case("bash-stdin", "bash <<'EOF'\ncat a\nEOF", "None"),
    case("bash-too-deep", 'bash -c "bash -c \'bash -c \\"bash -c cat\\\\ a\\"\'"', "None"),
    case("command-v", "command -v cat", "None"),
    case("time-p", "time -p cat a", "None"),
    case("env-flag", "env -i cat a", "None"),
    case("env-alone", "env", "None"),
    case("assignment-only", "FOO=1", "None"),
    case("export", "export X=1 && cat a", "None"),
    case("var-command", "$EDITOR a", "None"),
    case("relative-command", "./cat a", "None"),
    # ------------------------------------------------------------------ chains
    case("and", "cat a && cat b", "read a; read b"),
    case("semicolon", "mkdir -p out; touch out/.keep", "mkdir out; touch out/.keep"),
    case("newline", "cat a\ncat b", "read a; read b"),
    case("blank-lines", "\n\ncat a\n\n\ncat b\n", "read a; read b"),
    case("cd-middle", "mkdir -p out && cd out && touch a", "mkdir out; touch out/a"),
    case("cd-absolute", "cd /tmp; ls", "search /tmp"),
    case("cd-dotdot", "cd .. && cat x", "read ../x"),
    case("cd-dashdash", "cd -- src && cat a", "read src/a"),
    case("cd-back", "cd src && cd .. && cat a", "read a"),
    case("or", "cat README.md 2>/dev/null || cat README", "read README.md; read README"),
    case("several-heredocs", "cat > a <<'A'\n1\nA\ncat > b <<'B'\n2\nB", "write a; write b"),
    case("heredoc-then-and", "cat > a <<'EOF' && cat a\nx\nEOF", "write a; read a"),
    case("comment-line", "# look at it\ncat a", "read a"),
    case("comment-trailing", "cat a # and b", "read a"),
    case("shebang", "#!/bin/bash\nls src", "search src"),
    case("continuation", "grep -rn foo \\\n  src", "search src for foo"),
    case("newline-after-and", "cat a &&\ncat b", "read a; read b"),
    case("trailing-semicolon", "cat a;", "read a"),
    case("word-continuation", "cat a\\\nb", "read ab"),
    # chains: rejections
    case("command-member", "cat a && pytest", "None"),
    case("heredoc-then-run", "cat > t.py <<'EOF'\nx = 1\nEOF\npython t.py", "None"),
    case("echo-then-ls", "echo hello; ls", "None"),
    case("or-echo", "cat a.txt 2>/dev/null || echo missing", "None"),
    case("echo-separator", "echo '--- a'; cat a", "None"),
    case("pwd-and-ls", "pwd && ls", "None"),
    case("or-true", "mkdir -p x || true", "None"),
    case("or-echo-stderr", 'cat a || echo "no a" >&2', "None"),
    case("heredoc-print-then-read", "cat <<'EOF'\nnote\nEOF\ncat a", "None"),
    case("printf-only", "printf 'x'", "None"),
    case("true-only", "true", "None"),
    case("cd-only", "cd src", "None"),
    case("echo-only", "echo hi", "None"),
    case("heredoc-print-only", "cat <<'EOF'\nnote\nEOF", "None"),
    case("bash-c-cd-only", "bash -c 'cd src'", "None"),
    case("bash-c-cd-then-read", "bash -c 'cd src' && cat a", "None"),
    case("bash-c-cd-does-not-leak", "bash -c 'cd src && cat a' && cat b", "read src/a; read b"),
    case("pwd-only", "pwd", "None"),
    case("cd-or", "cd src || exit 1", "None"),
    case("cd-and-or", "cat a && cd b || cat c", "None"),
    case("cd-var", "cd $DIR && ls", "None"),
    case("cd-dash", "cd - && ls", "None"),
    case("cd-bare", "cd && ls", "None"),
    case("cd-two-args", "cd a b && ls", "None"),
    case("cd-glob", "cd sr* && ls", "None"),
    case("background", "cat a &", "None"),
    case("background-middle", "cat a & cat b", "None"),
    case("subshell", "(cd src && ls)", "None"),
    case("group", "{ cat a; }", "None"),
    case("if", "if [ -f a ]; then cat a; fi", "None"),
    case("for", "for f in a b; do cat $f; done", "None"),
    case("while", "while true; do ls; done", "None"),
    case("function", "f() { cat a; }", "None"),
    case("negation", "! cat a", "None"),
    case("double-bracket", "[[ -f a ]] && cat a", "None"),
    case("dangling-and", "cat a &&", "None"),
    case("dangling-pipe", "cat a |", "None"),
    case("leading-and", "&& cat a", "None"),
    case("empty-member", "; cat a", "None"),
    case("double-semicolon", "cat a; ; cat b", "None"),
    case("case", "case x in x) cat a;; esac", "None"),
    case("empty", "", "None"),
    case("blank", "  \n\t\n", "None"),
    case("comment-only", "# nothing", "None"),
    # ------------------------------------------------------------------ pipelines
    case("read-head", "cat a.py | head -50", "read a.py"),
    case("search-head", "grep -rn TODO . 2>/dev/null | head -20", "search . for TODO"),
    case("search-sort-head", "find . -name '*.py' | sort | head", "search . for *.py"),
    case("nl-sed", "nl -ba a.py | sed -n '100,160p'", "read a.py"),
    case("ls-tail", "ls -la | tail -5", "search ."),
    case("heredoc-tee", "cat <<'EOF' | tee cfg.ini\n[x]\nEOF", "write cfg.ini"),
    case("pipe-newline", "cat a |\nhead", "read a"),
    case("pipe-no-space", "cat a|head -n5", "read a"),
    case("head-head", "head -100 a | tail -20", "read a"),
    case("rg-files-head", "rg --files | head -50", "search ."),
    case("sort-flags", "ls | sort -rn -k 2", "search ."),
    # pipelines: rejections
    case("grep-filter", "cat a.py | grep import", "None"),
    case("wc-filter", "ls | wc -l", "None"),
    case("xargs-pipe", "find . -name '*.pyc' | xargs rm", "None"),
    case("into-program", "cat data.json | python -m json.tool", "None"),
    case("tee-middle", "echo x | tee f | head", "None"),
    case("pipe-amp", "ls |& head", "None"),
    case("filter-to-file", "cat a | head > b", "None"),
    case("source-to-file", "cat a > b | head", "None"),
    case("filter-with-file", "cat a | head b", "None"),
    case("filter-stdin", "cat a | head < b", "None"),
    case("sort-output", "ls | sort -o out", "None"),
    case("sed-filter-subst", "cat a | sed 's/x/y/'", "None"),
    case("write-then-filter", "sed -i 's/a/b/' f | head", "None"),
    case("producer-not-tee", "echo x | cat", "None"),
    case("less-pipe", "less a | head", "None"),
    case("long-pipeline", "cat a" + " | head" * 9, "None"),
    case("print-source", "cat <<'EOF' | head\nx\nEOF", "None"),
    case("tee-from-ls", "ls | tee files.txt", "None"),
    # ------------------------------------------------------------------ other rejections
    case("unknown", "git status", "None"),
    case("unbalanced-single", "cat 'a.py", "None"),
    case("unbalanced-double", 'cat "a.py', "None"),
    case("unbalanced-brace-param", "cat ${a", "None"),
    case("trailing-backslash", "cat a\\", "None"),
    case("process-subst", "cat <(ls)", "None"),
    case("process-subst-out", "tee >(cat) < a", "None"),
    case("arithmetic", "echo $((1+2)) > n.txt", "None"),
    case("old-arithmetic", "echo $[1+2] > n.txt", "None"),
    case("named-fd", "cat a {fd}>f", "None"),
    case("read-write-redirect", "cat <> f", "None"),
    case("fd3", "echo x 3> f", "None"),
    case("dup-input-file", "cat <&f", "None"),
    case("subst-in-echo", 'echo "$(whoami)" > f', "None"),
    case("subst-in-assignment", "X=$(id) cat a", "None"),
    case("nul", "cat a\x00b", "None"),
]

CASE_INDEX = {(p.values[0], p.values[1]): p.values[2] for p in CASES}


@pytest.mark.parametrize(("command", "workdir", "expected"), CASES)
def test_classify(command: str, workdir: str | None, expected: str) -> None:
    result = classify_bash(command, workdir)
    check_shape(result)
    assert render(result) == expected


def test_case_ids_and_commands_are_unique() -> None:
    ids = [p.id for p in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASE_INDEX) == len(CASES)


# ------------------------------------------------------------------ doc ↔ table


def _code(cell: str) -> str | None:
    m = re.fullmatch(r"(`+) ?(.*?) ?\1", cell)
    return m.group(2) if m else None


def doc_rows() -> list[tuple[str, str | None, str]]:
    """(command, workdir, events) of every example row of docs/bash.md's tables."""
    rows = []
    header: list[str] | None = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if "example" not in header or "events" not in header or set("".join(cells)) <= set("-: "):
            continue
        example = _code(cells[header.index("example")])
        events = _code(cells[header.index("events")])
        workdir = _code(cells[header.index("workdir")]) if "workdir" in header else None
        if example is not None and events is not None:
            rows.append((example.replace("↵", "\n").replace("⇥", "\t"), workdir, events))
    return rows


def test_doc_has_example_rows() -> None:
    rows = doc_rows()
    assert len(rows) > 150
    assert sum(1 for *_, events in rows if events == "None") > 50


@pytest.mark.parametrize(
    ("command", "workdir", "expected"),
    [pytest.param(*row, id=f"doc-{i}") for i, row in enumerate(doc_rows())],
)
def test_doc_rows_are_in_the_table(command: str, workdir: str | None, expected: str) -> None:
    assert CASE_INDEX.get((command, workdir)) == expected, "add this docs/bash.md row to CASES"
    assert render(classify_bash(command, workdir)) == expected


# ------------------------------------------------------------------ shape of results


def check_shape(result: object) -> None:
    assert result is None or (isinstance(result, tuple) and result)
    for op in result or ():
        assert type(op) is FileOp
        assert isinstance(op.path, str) and op.path
        if op.kind == "read":
            assert op.op is None and op.to is None and op.pattern is None
        elif op.kind == "search":
            assert op.op is None and op.to is None
            assert op.pattern is None or isinstance(op.pattern, str)
        else:
            assert op.kind == "write"
            assert op.op in WRITE_OPS and op.pattern is None
            assert (op.to is not None) == (op.op in ("move", "copy"))


def test_fileop_interface() -> None:
    assert [f.name for f in dataclasses.fields(FileOp)] == ["kind", "path", "op", "to", "pattern"]
    op = FileOp("read", "a")
    assert op == FileOp(kind="read", path="a", op=None, to=None, pattern=None)
    assert not hasattr(op, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        op.path = "b"  # type: ignore[misc]
    assert hash(op) == hash(FileOp("read", "a"))


def test_never_prints(capsys: pytest.CaptureFixture[str]) -> None:
    for p in CASES:
        classify_bash(p.values[0], p.values[1])
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    "bad",
    [None, 42, b"cat a", ["cat", "a"]],
    ids=["none", "int", "bytes", "list"],
)
def test_non_string_command(bad: object) -> None:
    assert classify_bash(bad) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "workdir", [42, "", "/a\x00b", b"/repo"], ids=["int", "empty", "nul", "bytes"]
)
def test_unusable_workdir_is_ignored(workdir: object) -> None:
    assert render(classify_bash("cat a", workdir)) == "read a"  # type: ignore[arg-type]


# ------------------------------------------------------------------ limits and cost


def test_large_heredoc_is_cheap() -> None:
    body = "\n".join(f"line {i}: `x` $(y) ${{z}} \\ ' \" | ; &&" for i in range(4000))
    command = f"cat > big.txt <<'EOF'\n{body}\nEOF"
    assert 100_000 < len(command) < MAX_COMMAND_CHARS
    start = time.perf_counter()
    assert render(classify_bash(command)) == "write big.txt"
    assert time.perf_counter() - start < 0.1


def test_too_long_is_none() -> None:
    command = "cat " + "a" * MAX_COMMAND_CHARS
    assert classify_bash(command) is None


@pytest.mark.parametrize(
    "command",
    [
        "echo " + "$$" * 100_000,
        "cat " + "a " * 100_000,
        "cat a;" * 30_000,
        "\n" * 200_000,
        'echo "' + "\\x" * 100_000 + '" > f',
        "cat " + "{a,b}" * 60,
        "cat " + "{" * 200 + "x" + "}" * 200,
        "sed -n '" + "1p;" * 50_000 + "' f",
        "find . " + "-name x -o " * 5_000,
        "cat <<A <<B <<C\n" * 1_000,
    ],
    ids=[
        "dollars",
        "words",
        "members",
        "newlines",
        "escapes",
        "brace-bomb",
        "brace-nest",
        "sed",
        "find",
        "heredocs",
    ],
)
def test_pathological_inputs_are_cheap(command: str) -> None:
    start = time.perf_counter()
    check_shape(classify_bash(command))
    assert time.perf_counter() - start < 0.2


# ------------------------------------------------------------------ properties

SHELLISH = st.lists(
    st.sampled_from(
        [
            "cat",
            "ls",
            "grep",
            "rg",
            "fd",
            "find",
            "tree",
            "head",
            "tail",
            "sed",
            "nl",
            "rm",
            "mv",
            "cp",
            "mkdir",
            "touch",
            "tee",
            "echo",
            "printf",
            "cd",
            "bash",
            "-c",
            "sh",
            "env",
            "time",
            "sudo",
            "-rn",
            "-n",
            "5",
            "-i",
            "-e",
            "-name",
            "-o",
            "-not",
            "-prune",
            "'*.py'",
            "*.py",
            "a.py",
            "src",
            ".",
            "..",
            "~",
            "/tmp",
            "{a,b}",
            "{1..2}",
            "$X",
            '"$(x)"',
            "`x`",
            "'1,5p'",
            "'s/a/b/'",
            "|",
            "||",
            "&&",
            ";",
            "&",
            "\n",
            ">",
            ">>",
            "<",
            "2>&1",
            "2>/dev/null",
            "<<'EOF'",
            "<<EOF",
            "<<-E",
            "<<<",
            "EOF",
            "\nEOF\n",
            "(",
            ")",
            "{",
            "}",
            "\\",
            "\\\n",
            "'",
            '"',
            "#",
            "=",
            "X=1",
            "--",
            "-",
            "\t",
            "\r",
            "$'a'",
            "${x}",
            "!",
            "if",
            "then",
            "fi",
            "{}",
            "\\;",
            "-exec",
            "-delete",
        ]
    ),
    max_size=14,
).map(" ".join)

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _unguarded(command: str, workdir: str | None) -> None:
    """The classifier without classify_bash's safety net: only _Reject may escape."""
    with contextlib.suppress(bashcmd._Reject):
        bashcmd._script(command, workdir, 0)


@FAST
@given(st.text(max_size=200), st.one_of(st.none(), st.text(max_size=10)))
def test_any_text(command: str, workdir: str | None) -> None:
    check_shape(classify_bash(command, workdir))
    if "\x00" not in command:
        _unguarded(command, None)


@FAST
@given(SHELLISH, st.sampled_from([None, "/repo", "rel", "~"]))
def test_shell_like_text(command: str, workdir: str | None) -> None:
    result = classify_bash(command, workdir)
    check_shape(result)
    _unguarded(command, workdir)
    if result is not None and workdir == "/repo":
        assert all(op.path.startswith(("/", "~")) for op in result)


@FAST
@given(st.sampled_from([p.values[0] for p in CASES]), st.data())
def test_mutated_cases(command: str, data: st.DataObject) -> None:
    """Truncations and insertions around known commands never raise."""
    cut = data.draw(st.integers(0, len(command)))
    junk = data.draw(st.text(alphabet="'\"\\`$(){}|&;<>\n#*? ", max_size=3))
    for variant in (command[:cut], command[:cut] + junk + command[cut:]):
        check_shape(classify_bash(variant))
        if "\x00" not in variant:
            _unguarded(variant, None)


# The early exit for commands that surely are no file operation must never change an answer.
_heads = st.sampled_from(
    [
        "cat",
        "ls",
        "rm",
        "echo",
        "cd",
        "bash",
        "env",
        "pytest",
        "npm",
        "seq",
        "/usr/bin/cat",
        "/bin/ls",
        "FOO=1",
        "X=a",
        "git",
        "make",
        ">",
        "if",
        "time",
        "nice",
        "command",
        "sh",
        "printf",
        "tee",
        "grep",
    ]
)
_args = st.sampled_from(
    [
        "a.txt",
        "-n",
        "5",
        "src",
        "&&",
        ";",
        "|",
        ">",
        "out.txt",
        "'q z'",
        '"d q"',
        "$X",
        "*.py",
        "-c",
        "'cat f'",
        "\n",
        "||",
        "2>&1",
        "<",
        "x",
    ]
)


@settings(max_examples=4000, deadline=None)
@given(st.lists(st.one_of(_heads, _args), min_size=1, max_size=8))
@example(["printf", "cat", "|", "time", "tee", "cat"])  # a tee behind a wrapper writes
def test_early_exit_agrees_with_the_full_parse(words):
    import opencode_events.core.bashcmd as bashcmd

    command = " ".join(words)
    fast = classify_bash(command)
    original = bashcmd._head_is_foreign
    bashcmd._head_is_foreign = lambda _command: False
    try:
        assert classify_bash(command) == fast
    finally:
        bashcmd._head_is_foreign = original

#!/usr/bin/env python3
"""No string comparison of a run-file value outside common/ft_runfile.c.

Issue 40: the run file's words (train.schedule, nodes.launcher, ...) and
booleans are parsed once, in common/ft_runfile.c, into C enums and bools; a
strcmp on them elsewhere would parse them again, each user with its own idea
of the words. The compiler refuses strcmp on an enum or a bool; this test
covers what it cannot see: a string member of the run file compared by
hand (a word smuggled back into a string field), and a word put back into
a string (ft_rf_*_name) only to be compared.

Scans every C/C++/CUDA source under FT_SRC (build trees and .git left
out) but common/ft_runfile.c. Comments are dropped and string literals
emptied first; a call of strcmp, strncmp, strcasecmp, strncasecmp or
memcmp is flagged when its arguments mention
  - a run-file struct member path: `rf.`, `rf->` (also `s->rf.`, `o->rf->`),
    or a member reached through a variable declared in the same function
    as an ft_runfile or one of its sections (ft_train_cfg *t: `t->`);
  - a variable declared in the same function as a `char *` taken from such
    a path (const char *o = s->rf.recovery.on_loss_spike; strcmp(o, ...));
  - an ft_rf_*_name() call (the word of an enum, compared as a string).
Functions are told apart by clang-format's layout: a line that is `}` alone
ends one. Fails naming FILE:LINE and the call for each.
"""
import os
import re
import sys

SRC = os.environ.get("FT_SRC") or os.path.join(os.path.dirname(__file__), "..", "..")
SRC = os.path.realpath(SRC)
EXCLUDE = {"common/ft_runfile.c"}
EXTS = (".c", ".h", ".cc", ".cpp", ".cu", ".cuh")

CMP = re.compile(r"\b(strcmp|strncmp|strcasecmp|strncasecmp|memcmp)\s*\(")
RF_PATH = re.compile(r"\brf\s*(?:\.|->)\s*[A-Za-z_]")
RF_NAME = re.compile(r"\bft_rf_\w+_name\s*\(")
# a variable of the run file's types: ft_runfile x / ft_runfile *x / ft_train_cfg *t ...
RF_VAR = re.compile(r"\bft_(?:runfile|\w+_cfg)\b\s*\*?\s*(?:const\s*)?\b([A-Za-z_]\w*)")
# a declaration of char pointers: const char *o = <expression>, *p = ...;
CHAR_DECL = re.compile(r"\bchar\s*\*[^;{}]*;")
DECLARATOR = re.compile(r"^\s*\*?\s*(?:const\s*)?([A-Za-z_]\w*)\s*=\s*(.*)$", re.S)


def strip(text):
    """Comments removed and literals emptied, newlines kept (line numbers)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def call_args(text, start):
    """The text inside the parentheses opening at text[start]."""
    depth, i = 0, start
    while i < len(text):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
        i += 1
    return text[start + 1 :]


def top_level_split(s):
    """s split at the commas outside parentheses and brackets."""
    parts, depth, cur = [], 0, []
    for c in s:
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts


def char_aliases(chunk):
    """(name, initializer) of each char pointer declared with one."""
    for d in CHAR_DECL.finditer(chunk):
        body = d.group(0)[len("char"):-1]
        for part in top_level_split(body):
            m = DECLARATOR.match(part)
            if m:
                yield m.group(1), m.group(2)


def functions(text):
    """(offset, chunk) pieces, each ending at a line that is `}` alone."""
    pieces, pos = [], 0
    for m in re.finditer(r"^\}[ \t]*$", text, re.M):
        pieces.append((pos, text[pos : m.end()]))
        pos = m.end()
    pieces.append((pos, text[pos:]))
    return pieces


def check_chunk(chunk):
    """(offset in chunk, call text) of each comparison of a run-file value."""
    rf_vars = {m.group(1) for m in RF_VAR.finditer(chunk)} - {"const"}
    member = RF_PATH.pattern
    if rf_vars:
        names = "|".join(sorted(map(re.escape, rf_vars)))
        member = r"(?:%s|\b(?:%s)\s*(?:\.|->)\s*[A-Za-z_])" % (member, names)
    member_re = re.compile(member)
    str_vars = {name for name, init in char_aliases(chunk)
                if member_re.search(init) or RF_NAME.search(init)}
    str_re = re.compile(r"\b(?:%s)\b" % "|".join(map(re.escape, sorted(str_vars)))) if str_vars else None
    hits = []
    for m in CMP.finditer(chunk):
        args = call_args(chunk, m.end() - 1)
        if member_re.search(args) or RF_NAME.search(args) or (str_re and str_re.search(args)):
            call = " ".join((m.group(1) + "(" + args + ")").split())
            hits.append((m.start(), call))
    return hits


# The detector on known cases, so that it cannot rot into passing anything.
SELF_BAD = [
    'int f(sup *s) {\n  return !strcmp(s->rf.doctor.on_join, "true");\n}',
    'int f(const ft_runfile *rf) {\n  return strncmp(\n      rf->checkpoint.store, "s3://", 5);\n}',
    'static double lr(const ft_train_cfg *t) {\n  if (strcmp(t->schedule, "linear") == 0)\n'
    '    return 1;\n}',
    'int f(sup *s) {\n  const char *a = "x", *o = s->rf.recovery.on_loss_spike;\n'
    '  return !strcmp(o, "warn");\n}',
    'int f(sup *s) {\n  return !strcmp(ft_rf_device_name(s->rf.nodes.device), "cuda");\n}',
]
SELF_GOOD = [
    'int f(sup *s) {\n  return s->rf.doctor.on_join && !strcmp(s->runfile_sha256, "x");\n}',
    'int f(const ft_runfile *rf) {\n  return rf->nodes.launcher == FT_RF_LAUNCHER_SSH;\n}\n'
    'int g(trainer *t) {\n  return !strcmp(t->name, "x"); /* strcmp(rf->run, "") */\n}',
    'int f(const char *snap, const char *runfile) {\n  return strcmp(snap, runfile);\n}',
]


def self_test():
    ok = True
    for i, src in enumerate(SELF_BAD):
        if not any(check_chunk(c) for _, c in functions(strip(src))):
            print("FAIL: self-test: bad case %d not detected:\n%s" % (i, src))
            ok = False
    for i, src in enumerate(SELF_GOOD):
        hits = [h for _, c in functions(strip(src)) for h in check_chunk(c)]
        if hits:
            print("FAIL: self-test: good case %d flagged: %s" % (i, hits))
            ok = False
    return ok


def sources():
    for root, dirs, files in os.walk(SRC):
        dirs[:] = sorted(d for d in dirs
                         if not d.startswith(".") and not d.startswith("build")
                         and not os.path.exists(os.path.join(root, d, "CMakeCache.txt")))
        for f in sorted(files):
            if f.endswith(EXTS):
                path = os.path.join(root, f)
                rel = os.path.relpath(path, SRC)
                if rel not in EXCLUDE:
                    yield rel, path


def main():
    if not self_test():
        return 1
    bad, nfiles = [], 0
    for rel, path in sources():
        nfiles += 1
        with open(path, encoding="utf-8", errors="replace") as fh:
            orig = fh.read()
        text, lines = strip(orig), orig.split("\n")
        for off, chunk in functions(text):
            for at, _call in check_chunk(chunk):
                line = text.count("\n", 0, off + at) + 1
                where = "%s:%d: %s" % (rel, line, lines[line - 1].strip())
                if where not in bad:
                    bad.append(where)
    if nfiles < 50:
        print("FAIL: only %d sources under %s: FT_SRC is not the source tree" % (nfiles, SRC))
        return 1
    for b in bad:
        print("FAIL: %s -- compares a run-file value as a string: use the enum or bool "
              "common/ft_runfile.c parsed it into, or a helper there (ft_runfile.h)" % b)
    if bad:
        return 1
    print("PASS: no string comparison of a run-file value in %d sources outside %s"
          % (nfiles, ", ".join(sorted(EXCLUDE))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

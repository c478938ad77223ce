#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Doc references that must stay true: paths and numbered sections.

    python3 tests/style/check_refs.py [--root DIR] [--summary]
    python3 tests/style/check_refs.py --self-test

Scans the tracked text files (git ls-files; every file when DIR is no git
checkout; never third_party/ or build/) and reports, as FILE:LINE: KIND:
what, and exits 1 when there is any:

  path     a doc or comment names a path under src/, tests/, docs/,
           include/, python/, bindings/, bench/, examples/ or cmake/ that
           does not exist. A path is looked up from the repository root and
           from each folder above the file that names it (python/tests may
           say src/x.cc for python/src/x.cc). Brace lists (error.{h,cc}) are
           expanded; a path with a placeholder (<vendor>, *, ...) is OK when
           its fixed part is the start of an existing path.
  section  a "§N" or "§N.M" reference names no heading numbered so in the
           doc it cites.
  nodoc    a "§N" reference whose doc cannot be told.
  heading  a doc named with a quoted heading (`gpu.md, "The backend table"`,
           `x.md's "H"`, `x.md ("H")`, `the README's "H"`) has no heading
           that starts with those words (its number aside), or is no doc;
           a Markdown link's #anchor names no heading of its target.
  path     (also) a Markdown link [text](target) whose target does not exist.

Which doc a § cites: the nearest doc named before it on the same line (a
path docs/.../x.md, a file name x.md, or one of the short names
spec = docs/spec/buffer-protocol.md, c-ffi, ipc, gpu, python, go, java,
extensions, fuzzing = docs/impl/<name>.md written right before the §, or
"spec" anywhere before it); in a comment, failing that, the nearest on the
three lines above; in a Markdown file, failing that, the file itself.
"§N of the spec" cites the doc named after it. A doc's numbered headings are the Markdown
headings that start with a number: "## 6. Mapping" is §6, "### 6.4 Round
trips" is §6.4, "### 1a. Handles" is §1a. A range "§10–11" checks both ends.

docs/performance-history.md is a record of past runs: its paths are those
of their day and are not checked (its § references are).
"""

import os
import re
import subprocess
import sys
import tempfile

ROOTS = ("src", "tests", "docs", "include", "python", "bindings", "bench", "examples", "cmake")
TEXT_EXT = (
    ".md",
    ".h",
    ".hpp",
    ".c",
    ".cc",
    ".cpp",
    ".json",
    ".xml",
    ".txt",
    ".py",
    ".pyi",
    ".go",
    ".java",
    ".sh",
    ".cmake",
    ".toml",
    ".yml",
    ".yaml",
    ".in",
    ".pml",
)
TEXT_NAMES = ("CMakeLists.txt",)
# performance-history.md quotes paths of its time; reference.md is the main
# page of the generated API reference, whose links are relative to it.
NO_PATH_CHECK = ("docs/performance-history.md", "docs/reference.md")
# This script: its self-test plants stale references on purpose.
SKIP = ("tests/style/check_refs.py",)
# Files that exist only after a build or an install, named as such.
GENERATED = (
    "include/hurray/version.h",
    "python/LICENSE",
    "python/hurray-src",
    "tests/fake_drivers/cuda/libcuda.so.1",
)
# Folders a file may name paths relative to, besides its own and the root's
# (a binding's doc speaks of src/ of that binding).
EXTRA_BASES = {
    "docs/impl/python.md": ["python"],
    "docs/impl/java.md": ["bindings/java"],
    "docs/impl/go.md": ["bindings/go"],
    "bindings/run_tests.sh": ["bindings/java", "bindings/go"],
}
SHORT_DOCS = {
    "spec": "docs/spec/buffer-protocol.md",
    "c-ffi": "docs/impl/c-ffi.md",
    "ipc": "docs/impl/ipc.md",
    "gpu": "docs/impl/gpu.md",
    "python": "docs/impl/python.md",
    "go": "docs/impl/go.md",
    "java": "docs/impl/java.md",
    "extensions": "docs/impl/extensions.md",
    "fuzzing": "docs/impl/fuzzing.md",
}

PATH_RE = re.compile(r"(?<![\w./$@-])((?:{})/[\w./<>{{}}*,+-]*)".format("|".join(ROOTS)))
SECTION_RE = re.compile(r"§§?\s*(\d+[a-z]?(?:\.\d+)*)((?:\s*[–-]\s*\d+(?:\.\d+)*)?)")
DOC_RE = re.compile(
    r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.md)\b"
    r"|(?<![\w/.-])({})(?:\.md)?(?=[\s,'\"`]*§)".format("|".join(re.escape(k) for k in SHORT_DOCS)),
    re.IGNORECASE,
)
SPEC_RE = re.compile(r"\b[Ss]pec(?:'s)?\b")
_SHORT_ALT = "|".join(re.escape(k) for k in SHORT_DOCS)
OF_DOC_RE = re.compile(rf"§\S*\s+of\s+(?:the\s+)?({_SHORT_ALT})\b", re.IGNORECASE)
# A doc named with a heading in quotes: `x.md, "H"`, `x.md: "H"`, `x.md's "H"`,
# `x.md ("H")`, `the README's "H"`.
NAMED_HEADING_RE = re.compile(
    r"(?:(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.md)|\bthe (README)(?=')|\b(README)\.md)"
    r"(?:, |: |'s | \()\"([^\"]{3,})\""
)
# A Markdown link's target: [text](path), [text](path#anchor), [text](#anchor).
MD_LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
NUMBER_RE = re.compile(r"^\d+[a-z]?(?:\.\d+)*\.?\s+")
ANY_HEADING_RE = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
HEADING_RE = re.compile(r"^#{1,6}\s+(\d+[a-z]?(?:\.\d+)*)[.\s]")


def is_script(root, f):
    """An extension-less file that starts with #! (.ci/run)."""
    if "." in f.split("/")[-1]:
        return False
    try:
        with open(os.path.join(root, f), "rb") as fh:
            return fh.read(2) == b"#!"
    except OSError:
        return False


def slug(heading):
    """The anchor a Markdown renderer (GitHub's rule) gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def list_files(root):
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        files = out.splitlines()
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x not in (".git", "build")]
            for n in names:
                files.append(os.path.relpath(os.path.join(d, n), root))
    keep = []
    for f in files:
        parts = f.split("/")
        if "third_party" in parts or parts[0] == "build":
            continue
        if f.endswith(TEXT_EXT) or parts[-1] in TEXT_NAMES or is_script(root, f):
            keep.append(f)
    return sorted(keep)


def expand_braces(p):
    m = re.search(r"\{([^{}]*)\}", p)
    if not m:
        return [p]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(p[: m.start()] + alt + p[m.end() :]))
    return out


class Checker:
    def __init__(self, root):
        self.root = root
        self.findings = []
        self.headings = {}
        self.all_paths = None

    def exists_prefix(self, prefix):
        """True when some path of the tree starts with prefix."""
        d, base = os.path.split(prefix)
        full = os.path.join(self.root, d)
        if not os.path.isdir(full):
            return False
        if not base:
            return True
        return any(n.startswith(base) for n in os.listdir(full))

    def path_ok(self, path, bases):
        for cand in expand_braces(path):
            cand = cand.rstrip(".")
            if cand.rstrip("/") in GENERATED:
                continue
            cut = min(
                [
                    i
                    for i in (
                        cand.find("<"),
                        cand.find("*"),
                        cand.find("{"),
                        cand.find("..."),
                        cand.find("X.Y"),
                    )
                    if i >= 0
                ]
                or [-1]
            )
            found = False
            for b in bases:
                if cut >= 0:
                    if self.exists_prefix(os.path.join(b, cand[:cut])):
                        found = True
                elif os.path.exists(os.path.join(self.root, b, cand)):
                    found = True
                if found:
                    break
            if not found:
                return cand
        return None

    def heading_lines(self, doc):
        """The Markdown headings of `doc` outside code fences, or None when
        there is no such file."""
        if doc not in self.headings:
            lines = []
            try:
                with open(os.path.join(self.root, doc), encoding="utf-8") as f:
                    fence = False
                    for line in f:
                        if line.startswith("```"):
                            fence = not fence
                        elif not fence and line.startswith("#"):
                            lines.append(line)
            except OSError:
                lines = None
            self.headings[doc] = lines
        return self.headings[doc]

    def doc_headings(self, doc):
        """The section numbers of `doc`'s numbered headings."""
        lines = self.heading_lines(doc)
        if lines is None:
            return None
        return {m.group(1) for m in map(HEADING_RE.match, lines) if m}

    def heading_texts(self, doc):
        """The text of each of `doc`'s headings, lower-cased."""
        lines = self.heading_lines(doc)
        if lines is None:
            return None
        return [m.group(1) for m in map(ANY_HEADING_RE.match, lines) if m]

    def has_heading(self, doc, name):
        """Whether a heading of `doc` starts with `name` (its number aside)."""
        name = name.lower()
        return any(NUMBER_RE.sub("", t).lower().startswith(name) for t in self.heading_texts(doc))

    def has_anchor(self, doc, anchor):
        return any(slug(t) == anchor.lower() for t in self.heading_texts(doc))

    def check_link(self, f, n, target):
        if re.match(r"^[a-z]+:", target):
            return  # a URL
        path, _, anchor = target.partition("#")
        doc = f
        if path:
            doc = os.path.normpath(os.path.join(os.path.dirname(f), path))
            if not os.path.exists(os.path.join(self.root, doc)):
                self.add(f, n, "path", f"links to {path}, which does not exist")
                return
        if anchor and doc.endswith(".md") and not self.has_anchor(doc, anchor):
            self.add(f, n, "heading", f"links to #{anchor}, which no heading of {doc} makes")

    def resolve_doc(self, name, here):
        if name.lower() in SHORT_DOCS:
            return SHORT_DOCS[name.lower()]
        if "/" in name:
            for b in bases_of(here):
                p = os.path.normpath(os.path.join(b, name))
                if os.path.exists(os.path.join(self.root, p)):
                    return p
            return name
        for d in ("", os.path.dirname(here), "docs", "docs/impl", "docs/spec", "docs/adr"):
            p = os.path.join(d, name)
            if os.path.exists(os.path.join(self.root, p)):
                return p
        return name

    def add(self, f, n, kind, msg):
        self.findings.append((f, n, kind, msg))

    def check_file(self, f):
        try:
            with open(os.path.join(self.root, f), encoding="utf-8") as fh:
                lines = fh.read().split("\n")
        except (OSError, UnicodeDecodeError):
            return
        bases = bases_of(f) + EXTRA_BASES.get(f, [])
        for n, line in enumerate(lines, 1):
            if f not in NO_PATH_CHECK:
                for m in PATH_RE.finditer(line):
                    p = m.group(1).rstrip(".,;:)`'\">")
                    bad = self.path_ok(p, bases)
                    if bad:
                        self.add(f, n, "path", f"names {bad}, which does not exist")
            for m in NAMED_HEADING_RE.finditer(line):
                name = m.group(1) or "README.md"
                doc = self.resolve_doc(name, f)
                if self.heading_texts(doc) is None:
                    self.add(
                        f, n, "heading", f'cites "{m.group(4)}" of {name}, which does not exist'
                    )
                elif not self.has_heading(doc, m.group(4)):
                    self.add(f, n, "heading", f'{doc} has no heading "{m.group(4)}"')
            if f.endswith(".md") and f not in NO_PATH_CHECK:
                # Not inside code spans: `f[Versioned](address)` is no link.
                for m in MD_LINK_RE.finditer(re.sub(r"`[^`]*`", "", line)):
                    self.check_link(f, n, m.group(1))
            for m in SECTION_RE.finditer(line):
                doc = self.doc_before(lines, n - 1, m.start(), f)
                if doc is None:
                    self.add(f, n, "nodoc", f"§{m.group(1)}: no doc named before it")
                    continue
                nums = self.doc_headings(doc)
                if nums is None:
                    self.add(f, n, "nodoc", f"§{m.group(1)} cites {doc}, which does not exist")
                    continue
                wanted = [m.group(1)]
                if m.group(2):
                    wanted.append(re.sub(r"[^\d.]", "", m.group(2)))
                for w in wanted:
                    if w not in nums:
                        self.add(f, n, "section", f"§{w}: {doc} has no heading numbered {w}")

    def doc_before(self, lines, i, col, here):
        after = OF_DOC_RE.match(lines[i][col:])
        if after:
            return SHORT_DOCS[after.group(1).lower()]
        # In Markdown only the line itself counts (a bare § is the file's
        # own); in a comment, also the three lines above.
        above = [] if here.endswith(".md") else [lines[j] for j in range(i - 1, max(i - 4, -1), -1)]
        for text in [lines[i][: col + 1]] + above:
            found = [
                (m.start(), self.resolve_doc(m.group(1) or m.group(2), here))
                for m in DOC_RE.finditer(text)
            ]
            found += [(m.start(), SHORT_DOCS["spec"]) for m in SPEC_RE.finditer(text)]
            if found:
                return max(found)[1]
        if here.endswith(".md"):
            return here
        return None

    def run(self):
        for f in list_files(self.root):
            if f not in SKIP:
                self.check_file(f)
        return self.findings


def bases_of(f):
    parts = f.split("/")[:-1]
    return [""] + ["/".join(parts[:k]) for k in range(len(parts), 0, -1)]


def self_test():
    with tempfile.TemporaryDirectory() as d:

        def put(path, text):
            os.makedirs(os.path.join(d, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(d, path), "w", encoding="utf-8") as fh:
                fh.write(text)

        put(
            "docs/impl/a.md",
            "# A\n\n## 1. One\n\n### 1.2 Two\n\nSee §1.2 and src/device/<vendor>/x.\n",
        )
        put(
            "src/ok.cc",
            "// src/ok.cc; a.md §1; docs/impl/a.md §1.2; src/{ok,ok}.cc\n"
            "// src/gone.cc (stale)\n// c-ffi §1 (no such doc here)\n"
            "// docs/impl/a.md §7 (no such heading)\n",
        )
        put(
            "src/other.cc",
            "// §3 with no doc named\n// §1 of the spec\n"
            '// (docs/impl/a.md, "Two") ok; (docs/impl/a.md, "Three") no\n'
            '// docs/impl/a.md\'s "One" ok; docs/impl/a.md ("Nein") no; gone.md, "Xyz" no\n',
        )
        put("docs/b.md", "# B\n\n[a](impl/a.md#12-two) [b](#b) [c](impl/gone.md) [d](#nope)\n")
        os.makedirs(os.path.join(d, "src/device"), exist_ok=True)
        got = sorted((f, n, k) for f, n, k, _ in Checker(d).run())
        want = sorted(
            [
                ("src/ok.cc", 2, "path"),
                ("src/ok.cc", 3, "nodoc"),
                ("src/ok.cc", 4, "section"),
                ("src/other.cc", 1, "nodoc"),
                ("src/other.cc", 2, "nodoc"),
                ("src/other.cc", 3, "heading"),
                ("src/other.cc", 4, "heading"),
                ("src/other.cc", 4, "heading"),
                ("docs/b.md", 3, "path"),
                ("docs/b.md", 3, "heading"),
            ]
        )
        if got != want:
            print(f"check_refs self-test FAILED:\n  got  {got}\n  want {want}")
            return 1
    print(
        "check_refs self-test: ok (a stale path, a bad §, a § with no doc, a missing "
        "quoted heading or doc, a broken link or anchor are caught)"
    )
    return 0


def main(argv):
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    summary = False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--self-test":
            return self_test()
        if a == "--root":
            root = args.pop(0)
        elif a == "--summary":
            summary = True
        else:
            print(__doc__)
            return 2
    findings = Checker(root).run()
    for f, n, kind, msg in findings:
        print(f"{f}:{n}: {kind}: {msg}")
    if summary or findings:
        counts = {}
        for _, _, k, _ in findings:
            counts[k] = counts.get(k, 0) + 1
        kinds = "".join(f", {k} {c}" for k, c in sorted(counts.items()))
        print(f"check_refs: {len(findings)} finding(s){kinds}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

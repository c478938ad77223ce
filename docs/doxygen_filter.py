#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Doxygen's input filter for the public headers (docs/Doxyfile).

The headers keep plain C comments, which every C compiler and reader
understands and which tests/packaging/check_doc_comments.cmake checks. This
filter shows Doxygen the same comments as documentation, without changing a
line number:

  * a comment that starts a line (`/* ...`) documents what follows it
    (`/** ...`); the first one of the file documents the file (`@file`);
    from its first "Label:" line on (Parameters:, Returns:, On failure:...)
    its lines stay lines (`@n`), as in the header; a section banner
    (`/* ====` or `/* ----`) stays a plain comment;
  * a comment after code on the same line (`x; /* ...`, an enumerator, a
    macro) documents that code (`/**< ...`);
  * in C++ (`.hpp`), `// ...` lines document what follows them (`/// ...`),
    the first block the file (which moves later lines down by one).

It writes the filtered file to standard output, as Doxygen's INPUT_FILTER
requires.
"""

import re
import sys

LEADING = re.compile(r"^(\s*)/\*(?![*!])")
BANNER = re.compile(r"^\s*/\*\s*(?:={8,}|-{8,})")  # a section banner: stays a plain comment
LABEL = re.compile(r"^\s*\*\s+[A-Z][A-Za-z ]{0,20}:")  # "Parameters:", "On failure:", ...
TRAILING = re.compile(r"^(\s*[^\s/].*?\S)(\s+)/\*(?![*!<])")
CXX_LINE = re.compile(r"^(\s*)//(?![/!])")


def main() -> int:
    path = sys.argv[1]
    cxx = path.endswith((".hpp", ".hh", ".hxx"))
    first = True
    in_comment = False
    in_doc = False  # inside a comment this filter made documentation
    structured = False  # past its first "Label:" line: lines kept as lines
    with open(path, encoding="utf-8") as f:
        for line in f:
            out = line
            if line.startswith("// SPDX-License-Identifier"):
                pass
            elif in_comment:
                if in_doc and LABEL.match(line):
                    structured = True
                if structured and "*/" not in line and line.strip() != "*":
                    # Keep the header's line structure (parameter lists,
                    # Returns lists): @n is Doxygen's forced line break.
                    out = line.rstrip("\n") + " @n\n"
            elif BANNER.match(line):
                pass
            elif LEADING.match(line):
                in_doc = True
                tag = "/** @file\n" if first else "/**"
                out = LEADING.sub(lambda m, tag=tag: m.group(1) + tag, line, count=1)
                if first:  # keep the line count: the rest of the line follows @file's
                    out = out.replace("@file\n", "@file ", 1)
                first = False
            elif TRAILING.match(line):
                out = TRAILING.sub(lambda m: m.group(1) + m.group(2) + "/**<", line, count=1)
            elif cxx and CXX_LINE.match(line):
                tag = "/// @file\n///" if first else "///"  # one line more, once
                out = CXX_LINE.sub(lambda m, tag=tag: m.group(1) + tag, line, count=1)
                first = False
            # Whether a block comment is still open at the end of this line.
            opened = out.rfind("/*")
            closed = out.rfind("*/")
            if opened > closed:
                in_comment = True
            elif closed >= 0 and closed > opened:
                in_comment = in_doc = structured = False
            sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

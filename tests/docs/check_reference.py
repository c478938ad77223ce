#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the API reference that docs/build.sh generated.

    python3 tests/docs/check_reference.py OUT --python PY
    python3 tests/docs/check_reference.py --self-test

Every public name must be in the output, with documentation:

  * C (include/hurray/hurray.h): each function declared HURRAY_API, each
    typedef'd type, each HURRAY_* macro (include guards aside), and each
    member of the function table hurray_api. Doxygen's XML (OUT/xml) must
    have it with a non-empty description, and some page of OUT/html must
    name it. A table member without a comment of its own is documented by
    the function it stands for (hurray_api's comment says so), which must
    then be.
  * C++ (include/hurray/hurray.hpp): each class and struct of namespace
    hurray, likewise.
  * Python: each name of hurray.__all__, as PY imports it, must be named on
    the pydoc page OUT/html/python/hurray.html, and each function and class
    among them must have a docstring.

It prints each missing name and exits 1 if there is one.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, Iterable, List, Set

ROOT = Path(__file__).resolve().parents[2]

C_FUNCTION = re.compile(r"^HURRAY_API\b[^(]*?\b(hurray_\w+)\s*\(", re.M)
C_TYPEDEF_NAME = re.compile(
    r"}\s*(hurray_\w+)\s*;|typedef\s+[^;{]*?\(\s*\*\s*(hurray_\w+)\s*\)|"
    r"typedef\s+(?:struct|enum)\s+\w+\s+(hurray_\w+)\s*;"
)
C_MACRO = re.compile(r"^#\s*define\s+(HURRAY_\w+)", re.M)
C_TABLE = re.compile(r"typedef struct hurray_api \{(.*?)\} hurray_api;", re.S)
C_TABLE_MEMBER = re.compile(r"\(\s*\*\s*(\w+)\s*\)\s*\(")
CXX_CLASS = re.compile(r"^(?:class|struct)\s+(\w+)\b[^;]*$", re.M)


def c_names(header: str) -> Set[str]:
    names = set(C_FUNCTION.findall(header))
    for groups in C_TYPEDEF_NAME.findall(header):
        names.update(g for g in groups if g)
    names.update(m for m in C_MACRO.findall(header) if not m.endswith("_H_"))
    table = C_TABLE.search(header)
    if table:
        names.update("hurray_api::" + m for m in C_TABLE_MEMBER.findall(table.group(1)))
    return names


def cxx_names(header: str) -> Set[str]:
    """Classes and structs declared at the top level of namespace hurray."""
    inside = header.split("namespace hurray {", 1)[-1]
    return {"hurray::" + n for n in CXX_CLASS.findall(inside)}


def text_of(node) -> str:
    return "".join(node.itertext()).strip() if node is not None else ""


def documented_in_xml(xml_dir: Path) -> Dict[str, bool]:
    """Name -> whether Doxygen has a description for it. Members are known by
    their own name and, inside a compound, as compound::member."""
    found: Dict[str, bool] = {}

    def note(name: str, doc: bool) -> None:
        found[name] = found.get(name, False) or doc

    for f in sorted(xml_dir.glob("*.xml")):
        if f.name == "index.xml":
            continue
        root = ET.parse(f).getroot()
        for compound in root.iter("compounddef"):
            cname = text_of(compound.find("compoundname"))
            cdoc = bool(
                text_of(compound.find("briefdescription"))
                or text_of(compound.find("detaileddescription"))
            )
            note(cname, cdoc)
            for member in compound.iter("memberdef"):
                mname = text_of(member.find("name"))
                mdoc = bool(
                    text_of(member.find("briefdescription"))
                    or text_of(member.find("detaileddescription"))
                    or text_of(member.find("inbodydescription"))
                )
                note(mname, mdoc)
                if compound.get("kind") in ("struct", "class", "union"):
                    note(cname + "::" + mname, mdoc)
    return found


def html_text(html_dir: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in html_dir.glob("*.html"))


def check_c(out: Path, names: Iterable[str]) -> List[str]:
    xml = documented_in_xml(out / "xml")
    html = html_text(out / "html")
    problems = []
    for name in sorted(names):
        if name.startswith("hurray_api::") and name in xml and not xml[name]:
            # hurray_api's comment says each member is the function of its
            # name with the "hurray_" prefix, with that function's contract.
            fn = "hurray_" + name.split("::", 1)[1]
            xml[name] = xml.get(fn, False)
        if name not in xml:
            problems.append(f"{name}: not in the Doxygen output")
        elif not xml[name]:
            problems.append(f"{name}: in the Doxygen output without a description")
        elif name.rsplit("::", 1)[-1] not in html:
            problems.append(f"{name}: on no HTML page")
    return problems


PY_PROBE = """
import inspect, json, hurray
rows = []
for n in hurray.__all__:
    o = getattr(hurray, n)
    callable_ = inspect.isclass(o) or callable(o)
    rows.append([n, callable_, bool(inspect.getdoc(o)) if callable_ else True])
print(json.dumps(rows))
"""


def check_python(out: Path, python: str) -> List[str]:
    page = out / "html" / "python" / "hurray.html"
    if not page.is_file():
        return [f"{page}: missing (pydoc did not write the package's page)"]
    text = page.read_text(errors="replace")
    rows = json.loads(
        subprocess.run([python, "-c", PY_PROBE], check=True, capture_output=True, text=True).stdout
    )
    problems = []
    for name, is_callable, has_doc in rows:
        if not re.search(r"\b" + re.escape(name) + r"\b", text):
            problems.append(f"hurray.{name}: not on {page.name}")
        elif is_callable and not has_doc:
            problems.append(f"hurray.{name}: has no docstring")
    return problems


def run(out: Path, python: str) -> int:
    header = (ROOT / "include/hurray/hurray.h").read_text()
    hpp = (ROOT / "include/hurray/hurray.hpp").read_text()
    c = c_names(header)
    cxx = cxx_names(hpp)
    problems = check_c(out, c | cxx) + check_python(out, python)
    for p in problems:
        print(f"check_reference: {p}", file=sys.stderr)
    if problems:
        print(f"check_reference: {len(problems)} public name(s) missing", file=sys.stderr)
        return 1
    print(
        f"check_reference: {len(c)} C and {len(cxx)} C++ names documented in the Doxygen "
        f"output, hurray.__all__ on the pydoc page"
    )
    return 0


def self_test() -> int:
    """The name scan finds each kind, and a missing or undocumented name is
    reported."""
    header = """
#define HURRAY_THING 1
#ifndef HURRAY_X_H_
typedef struct hurray_a { int x; } hurray_a;
typedef void (*hurray_fn)(void *user);
typedef struct hurray_api {
  int32_t (*share)(hurray_buffer *src);
} hurray_api;
HURRAY_API HURRAY_NODISCARD int32_t hurray_go(int x);
"""
    want = {"HURRAY_THING", "hurray_a", "hurray_fn", "hurray_api", "hurray_go", "hurray_api::share"}
    got = c_names(header)
    ok = got == want
    if not ok:
        print(f"self-test: c_names found {sorted(got)}, expected {sorted(want)}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as d:
        out = Path(d)
        (out / "xml").mkdir()
        (out / "html").mkdir()
        (out / "xml" / "a.xml").write_text(
            "<doxygen><compounddef kind='file'><compoundname>hurray.h</compoundname>"
            "<briefdescription/><detaileddescription/>"
            "<memberdef kind='function'><name>hurray_go</name>"
            "<briefdescription><para>Goes.</para></briefdescription></memberdef>"
            "<memberdef kind='define'><name>HURRAY_THING</name>"
            "<briefdescription/><detaileddescription/></memberdef>"
            "</compounddef></doxygen>"
        )
        (out / "html" / "a.html").write_text("hurray_go HURRAY_THING")
        problems = check_c(out, ["hurray_go", "HURRAY_THING", "hurray_gone"])
        expected = [
            "HURRAY_THING: in the Doxygen output without a description",
            "hurray_gone: not in the Doxygen output",
        ]
        if problems != expected:
            print(f"self-test: check_c reported {problems}, expected {expected}", file=sys.stderr)
            ok = False
    print("check_reference self-test: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", type=Path, help="docs/build.sh's output folder")
    ap.add_argument("--python", default=sys.executable, help="a python that imports hurray")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if args.out is None:
        ap.error("OUT is required")
    return run(args.out, args.python)


if __name__ == "__main__":
    sys.exit(main())

# SPDX-License-Identifier: Apache-2.0
"""The package version, for scikit-build-core's [[tool.dynamic-metadata]]
(pyproject.toml): read with a regex from the first existing file of the
``inputs`` setting, so that one table serves a checkout (the repository
root's CMakeLists.txt, one level up) and an unpacked sdist (its copy in
hurray-src/), which the deprecated tool.scikit-build.metadata table did with
an if.from-sdist override. Paths are relative to the current folder, python/
(scikit-build-core runs providers there).

Settings: ``field`` (must be "version"), ``inputs`` (list of paths),
``regex`` (with a named group ``value``). A missing file list, no existing
file or no match raises ``RuntimeError``, which fails the build with its
message.
"""

import os
import re
from typing import Any, Dict, Mapping


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> Dict[str, str]:
    """Returns ``{"version": "x.y.z"}`` read as described above."""
    del project  # the version depends on nothing else in [project]
    unknown = set(settings) - {"field", "inputs", "regex"}
    if unknown or settings.get("field") != "version":
        raise RuntimeError(
            f"hurray_version: takes field='version', inputs, regex; got {dict(settings)}"
        )
    inputs = settings.get("inputs")
    regex = settings.get("regex")
    if not isinstance(inputs, list) or not inputs or not isinstance(regex, str):
        raise RuntimeError("hurray_version: inputs must be a list of paths and regex a string")
    for path in inputs:
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                match = re.search(regex, f.read(), re.MULTILINE)
            if match is None:
                raise RuntimeError(f"hurray_version: {regex!r} does not match in {path}")
            return {"version": match.group("value")}
    raise RuntimeError(f"hurray_version: none of {inputs} exists in {os.getcwd()}")

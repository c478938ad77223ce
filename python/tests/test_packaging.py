# SPDX-License-Identifier: Apache-2.0
"""The package as its peers ship: typed, with libhurray's headers,
library, CMake package and pkg-config file inside, found through hurray's
functions and `python -m hurray`; and a working sdist."""

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import venv
from typing import Any, Sequence

import pytest

import hurray

from native_build import HERE, compiler

REPO = os.path.dirname(os.path.dirname(HERE))
PKG = os.path.dirname(os.path.abspath(hurray.__file__))


# A plain CMake build tree (HURRAY_PY_FROM_BUILD=1) has the headers and the
# library in its package folder, but the CMake package and hurray.pc only
# come with an installed wheel.
needs_wheel = pytest.mark.skipif(
    not os.path.isfile(os.path.join(hurray.get_cmake_dir(), "hurrayConfig.cmake")),
    reason="not an installed wheel (no CMake package in the package folder)",
)


def run(cmd: Sequence[str], **kw: Any) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop("timeout", 600), **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}\n{r.stdout}\n{r.stderr}"
    out: str = r.stdout
    return out


@needs_wheel
def test_paths_point_into_the_package() -> None:
    inc = hurray.get_include()
    for h in ("hurray.h", "dlpack.h", "version.h"):
        assert os.path.isfile(os.path.join(inc, "hurray", h)), h
    assert os.path.isfile(hurray.get_library())
    assert os.path.dirname(hurray.get_library()) == hurray.get_lib_dir()
    assert os.path.isfile(os.path.join(hurray.get_cmake_dir(), "hurrayConfig.cmake"))
    assert os.path.isfile(os.path.join(hurray.get_pkgconfig_dir(), "hurray.pc"))
    for p in (inc, hurray.get_library(), hurray.get_cmake_dir()):
        assert os.path.commonpath([p, PKG]) == PKG
    assert os.path.isfile(os.path.join(PKG, "py.typed"))
    assert os.path.isfile(os.path.join(PKG, "_native.pyi"))


@needs_wheel
def test_distribution_is_libhurray_and_owns_the_hurray_package() -> None:
    """`hurray` on PyPI is an unrelated project: this one is
    distributed as libhurray, and no other installed distribution claims the
    `hurray` import package."""
    from importlib import metadata

    dist = metadata.distribution("libhurray")
    assert dist.metadata["Name"] == "libhurray"
    assert dist.version == hurray.__version__
    files = [str(f) for f in dist.files or []]
    assert any(f.replace(os.sep, "/").endswith("hurray/_native.pyi") for f in files), files
    assert metadata.packages_distributions().get("hurray") == ["libhurray"]


def check_license_in_dist_info(python: str) -> None:
    """The installed libhurray's .dist-info carries the repository's LICENSE
    (PEP 639: licenses/LICENSE) and its METADATA names it."""
    probe = (
        "import importlib.metadata as m, json\n"
        "d = m.distribution('libhurray')\n"
        "lic = [f for f in d.files or [] if str(f).endswith('.dist-info/licenses/LICENSE')]\n"
        "print(json.dumps({'files': [str(f) for f in lic],\n"
        "                  'text': lic[0].read_text() if lic else None,\n"
        "                  'license_file': d.metadata.get_all('License-File'),\n"
        "                  'expression': d.metadata.get('License-Expression'),\n"
        "                  'metadata_version': d.metadata.get('Metadata-Version')}))\n"
    )
    import json

    got = json.loads(run([python, "-c", probe], env=dict(os.environ, PYTHONPATH="")))
    with open(os.path.join(REPO, "LICENSE"), encoding="utf-8") as f:
        text = f.read()
    assert len(got["files"]) == 1, got
    assert got["text"] == text
    assert got["license_file"] == ["LICENSE"], got
    assert got["expression"] == "Apache-2.0", got
    assert tuple(int(x) for x in got["metadata_version"].split(".")) >= (2, 4), got


@needs_wheel
def test_wheel_dist_info_carries_the_license() -> None:
    """The licence text travels in the wheel, not only its name."""
    check_license_in_dist_info(sys.executable)


def test_the_module_loads_the_library_get_library_names() -> None:
    with open("/proc/self/maps") as f:
        maps = f.read()
    assert os.path.realpath(hurray.get_library()) in maps


def test_python_m_hurray() -> None:
    out = run(
        [
            sys.executable,
            "-m",
            "hurray",
            "--includedir",
            "--libdir",
            "--cmakedir",
            "--libfile",
            "--pkgconfigdir",
            "--version",
        ]
    ).splitlines()
    assert out == [
        hurray.get_include(),
        hurray.get_lib_dir(),
        hurray.get_cmake_dir(),
        hurray.get_library(),
        hurray.get_pkgconfig_dir(),
        hurray.__version__,
    ]
    r = subprocess.run([sys.executable, "-m", "hurray"], capture_output=True, text=True)
    assert r.returncode == 2 and "--includedir" in r.stderr


def check_consumer_output(out: str) -> None:
    version, runtime, path = out.split()
    assert version == hurray.__version__
    assert os.path.realpath(path) == os.path.realpath(hurray.get_library())


@needs_wheel
@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_consumer_finds_and_links_the_wheels_libhurray(tmp_path: pathlib.Path) -> None:
    build = tmp_path / "build"
    run(
        [
            "cmake",
            "-S",
            os.path.join(HERE, "aid", "cmake_consumer"),
            "-B",
            str(build),
            f"-Dhurray_DIR={hurray.get_cmake_dir()}",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
    )
    run(["cmake", "--build", str(build)])
    exe = build / "consumer"
    check_consumer_output(run([str(exe)]))
    needed = run(["readelf", "-d", str(exe)]) if shutil.which("readelf") else ""
    if needed:
        assert "[libhurray.so]" in needed  # the wheel's SONAME


@needs_wheel
@pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config is not installed")
def test_pkg_config_consumer(tmp_path: pathlib.Path) -> None:
    env = dict(os.environ, PKG_CONFIG_PATH=hurray.get_pkgconfig_dir())
    flags = run(["pkg-config", "--cflags", "--libs", "hurray"], env=env).split()
    assert run(["pkg-config", "--modversion", "hurray"], env=env).strip() == hurray.__version__
    exe = tmp_path / "consumer"
    run(
        [
            compiler(),
            os.path.join(HERE, "aid", "cmake_consumer", "consumer.c"),
            "-o",
            str(exe),
            *flags,
            f"-Wl,-rpath,{hurray.get_lib_dir()}",
            "-ldl",
        ]
    )
    check_consumer_output(run([str(exe)]))


def _have(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _have("mypy"), reason="mypy is not installed")
def test_mypy_strict_on_the_examples_and_tests(tmp_path: pathlib.Path) -> None:
    """The stubs (hurray/_native.pyi, py.typed) type-check the examples and
    these tests under mypy --strict; the deliberate misuses in the error
    tests carry `type: ignore[...]`, which --strict reports if the stubs
    stopped catching them."""
    run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "mypy"),
            os.path.join(REPO, "examples", "swap_tensors.py"),
            HERE,
        ],
        cwd=REPO,
        timeout=900,
    )
    # A run of its own: its conftest.py and the tests' would be one module name.
    run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "mypy"),
            os.path.join(REPO, "examples", "pytest_leak_check"),
        ],
        cwd=REPO,
        timeout=900,
    )


@pytest.mark.skipif(not _have("build"), reason="the `build` package is not installed")
def test_sdist_builds_and_installs_in_a_fresh_venv(tmp_path: pathlib.Path) -> None:
    dist = tmp_path / "dist"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--sdist",
            "--no-isolation",
            "-o",
            str(dist),
            os.path.join(REPO, "python"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    # No deprecated scikit-build-core setting (such as tool.scikit-build.metadata).
    assert "scikit-build-core" in r.stdout
    assert "deprecat" not in (r.stdout + r.stderr).lower(), r.stdout + r.stderr
    (sdist,) = dist.glob("libhurray-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = t.getnames()
    top = names[0].split("/")[0]
    for need in (
        "hurray-src/CMakeLists.txt",
        "hurray-src/include/hurray/hurray.h",
        "hurray-src/src/api/share.cc",
        "hurray-src/cmake/hurray.pc.in",
        "src/buffer.cc",
        "hurray/_native.pyi",
        "hurray/py.typed",
        "pyproject.toml",
        "LICENSE",
    ):
        assert f"{top}/{need}" in names, need
    assert not os.path.exists(os.path.join(REPO, "python", "hurray-src"))  # the copy is gone
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    run(
        [str(py), "-m", "pip", "install", "-q", str(sdist)],
        timeout=1200,
        env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONPATH=""),
    )
    smoke = (
        "import array, os, hurray\n"
        "b = hurray.empty((2, 3), 'float64')\n"
        "m = memoryview(b); m[1, 2] = 2.5\n"
        "a = array.array('d'); a.frombytes(b)\n"
        "assert a[5] == 2.5 and len(b.share(2)) == 2\n"
        "assert os.path.isfile(hurray.get_library())\n"
        "assert os.path.isfile(os.path.join(hurray.get_include(), 'hurray', 'hurray.h'))\n"
        f"assert hurray.__version__ == {hurray.__version__!r}\n"
        "print('smoke ok')\n"
    )
    out = run([str(py), "-c", smoke], cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=""))
    assert "smoke ok" in out
    # Built from the sdist (no repository around it), the wheel has the licence too.
    check_license_in_dist_info(str(py))


def test_the_readmes_python_blocks_run() -> None:
    """Every ```python block of README.md runs as written, in a fresh process."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)
    assert len(blocks) >= 3, "README.md's Python examples went missing"
    missing = set()
    for code in blocks:
        # A block that imports a framework this venv lacks (python/run_tests.sh
        # tolerates a failed jax or tensorflow install) is skipped, by name.
        imported = re.findall(r"^(?:import|from) (\w+)", code, flags=re.M)
        absent = sorted(m for m in imported if importlib.util.find_spec(m) is None)
        if absent:
            missing.update(absent)
            continue
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, f"README block failed:\n{code}\n{r.stderr}"
        if "TF_CPP_MIN_LOG_LEVEL" in code:  # its comment promises a quiet start
            assert "oneDNN" not in r.stderr and "absl" not in r.stderr, r.stderr
    if missing:
        pytest.skip(f"README blocks that import {', '.join(sorted(missing))} were not run")


def test_the_python_readmes_blocks_run(tmp_path: pathlib.Path) -> None:
    """Every ```python block of python/README.md (the PyPI page) runs as
    written, as a script file, so that a spawn Pool can import it again."""
    with open(os.path.join(REPO, "python", "README.md"), encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)
    assert blocks, "python/README.md's Python example went missing"
    for i, code in enumerate(blocks):
        imported = re.findall(r"^(?:import|from) (\w+)", code, flags=re.M)
        absent = sorted(m for m in imported if importlib.util.find_spec(m) is None)
        if absent:
            pytest.skip(f"python/README.md block imports {', '.join(absent)}, not installed")
        script = tmp_path / f"block{i}.py"
        script.write_text(code)
        r = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, f"python/README.md block failed:\n{code}\n{r.stderr}"


def _source_digest(repo: str) -> str:
    env_sh = os.path.join(REPO, "python", "scripts", "env.sh")
    r = subprocess.run(
        ["bash", "-c", f'. "{env_sh}" && hurray_py_source_digest "$1"', "-", repo],
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout.strip()


def test_source_digest_ignores_what_the_build_writes(tmp_path: pathlib.Path) -> None:
    """examples/run_demo.sh rebuilds only when the sources changed: the
    build's own git-ignored output in the tree (python/LICENSE, copied by
    the build backend) must not count, or a fresh clone's second run
    rebuilds; an edit of a tracked file, or a new source, must count."""
    if (
        shutil.which("git") is None
        or not os.path.isdir(os.path.join(REPO, ".git"))
        and not (os.path.isfile(os.path.join(REPO, ".git")))
    ):
        pytest.skip("not a git checkout")
    clone = str(tmp_path / "clone")
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", REPO, clone], check=True)
    first = _source_digest(clone)
    shutil.copy(os.path.join(clone, "LICENSE"), os.path.join(clone, "python", "LICENSE"))
    os.makedirs(os.path.join(clone, "python", "hurray-src"))
    pathlib.Path(clone, "python", "hurray-src", "x.c").write_text("int x;\n")
    assert _source_digest(clone) == first
    pathlib.Path(clone, "src", "new_source.cc").write_text("// new\n")
    second = _source_digest(clone)
    assert second != first
    with open(os.path.join(clone, "python", "hurray", "_mp.py"), "a") as f:
        f.write("# edited\n")
    assert _source_digest(clone) not in (first, second)

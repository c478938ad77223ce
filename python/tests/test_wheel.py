# SPDX-License-Identifier: Apache-2.0
"""The wheel as shipped: built and repaired to a manylinux tag by
python/scripts/build_wheel.sh, with no deprecated scikit-build-core setting,
installable and importable in a fresh venv, and usable by build systems
there: the `hurray-config` console script and the `pkg_config` entry point
(NumPy registers one too) lead a C compiler and pkg-config to the wheel's
headers and library.

python/run_tests.sh builds the wheel once, installs it in the test venv and
names it in HURRAY_PY_WHEEL; without that variable these tests skip.
"""

import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from typing import Any, Dict, Iterator, List, Sequence, Union

import pytest

import hurray

from native_build import HERE, compiler

WHEEL = os.environ.get("HURRAY_PY_WHEEL", "")
pytestmark = pytest.mark.skipif(
    not os.path.isfile(WHEEL),
    reason="HURRAY_PY_WHEEL names no wheel (python/run_tests.sh builds and names it)",
)
CONSUMER_C = os.path.join(HERE, "aid", "cmake_consumer", "consumer.c")
# A platform tag auditwheel gives: manylinux_<glibc major>_<minor>_<arch>.
MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_" + re.escape(platform.machine()))


def run(cmd: Sequence[Union[str, "os.PathLike[str]"]], **kw: Any) -> str:
    r = subprocess.run(
        list(map(str, cmd)), capture_output=True, text=True, timeout=kw.pop("timeout", 600), **kw
    )
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}\n{r.stdout}\n{r.stderr}"
    out: str = r.stdout
    return out


def clean_env() -> Dict[str, str]:
    """The environment for the fresh venv's processes: nothing of the test
    venv's PYTHONPATH (conftest.py puts the test aid there)."""
    return dict(os.environ, PYTHONPATH="", PIP_DISABLE_PIP_VERSION_CHECK="1")


def wheel_tags() -> List[str]:
    """The tags of the wheel's file name (PEP 427: name-ver-py-abi-plat.whl,
    each part possibly a '.'-joined set), as py-abi-plat triples."""
    stem = os.path.basename(WHEEL)[: -len(".whl")]
    py, abi, plats = stem.split("-")[-3:]
    return [
        f"{p}-{a}-{pl}" for p in py.split(".") for a in abi.split(".") for pl in plats.split(".")
    ]


def test_wheel_tag_is_manylinux_in_name_and_wheel_file() -> None:
    tags = wheel_tags()
    assert tags and all(MANYLINUX.fullmatch(t.split("-")[2]) for t in tags), tags
    with zipfile.ZipFile(WHEEL) as z:
        (wheel_file,) = [n for n in z.namelist() if n.endswith(".dist-info/WHEEL")]
        text = z.read(wheel_file).decode()
        names = z.namelist()
    assert sorted(re.findall(r"^Tag: (\S+)$", text, flags=re.M)) == sorted(tags), text
    assert "Root-Is-Purelib: false" in text
    # Nothing was grafted in: the wheel needs no library from outside it.
    assert not [n for n in names if ".libs/" in n], names
    assert "hurray/lib/libhurray.so" in names


def test_auditwheel_show_finds_the_wheel_consistent() -> None:
    pytest.importorskip("auditwheel", reason="auditwheel is not installed")
    out = run([sys.executable, "-m", "auditwheel", "show", WHEEL])
    flat = " ".join(out.split())
    plat = wheel_tags()[0].split("-")[2]
    assert f'is consistent with the following platform tag: "{plat}"' in flat, out
    assert "external shared libraries" not in flat, out  # nothing to graft


def test_build_log_has_no_deprecation_warning() -> None:
    """scikit-build-core warned `tool.scikit-build.metadata is deprecated`
    on every build until pyproject.toml moved to [[tool.dynamic-metadata]]."""
    log = pathlib.Path(WHEEL).parent / "build.log"
    text = log.read_text(encoding="utf-8")
    assert "scikit-build-core" in text and "Successfully built" in text  # the real log
    assert "deprecat" not in text.lower(), text
    assert not re.search(r"^WARNING", text, flags=re.M), text


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    """A venv that sees nothing of the test venv, with the wheel installed."""
    env_dir = tmp_path_factory.mktemp("wheel-venv") / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    run(
        [env_dir / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", WHEEL],
        env=clean_env(),
        timeout=600,
    )
    yield env_dir


def fresh_site_packages(env_dir: pathlib.Path) -> str:
    out = run(
        [
            env_dir / "bin" / "python",
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['platlib'])",
        ],
        env=clean_env(),
    )
    return os.path.realpath(out.strip())


def test_wheel_installs_and_imports_in_a_fresh_venv(
    fresh_venv: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    smoke = (
        "import array, json, os, hurray\n"
        "b = hurray.empty((2, 3), 'float64')\n"
        "m = memoryview(b); m[1, 2] = 2.5\n"
        "a = array.array('d'); a.frombytes(b)\n"
        "assert a[5] == 2.5 and len(b.share(2)) == 2\n"
        "print(json.dumps({'file': hurray.__file__, 'version': hurray.__version__,\n"
        "                  'lib': hurray.get_library()}))\n"
    )
    got = json.loads(
        run([fresh_venv / "bin" / "python", "-c", smoke], cwd=tmp_path, env=clean_env())
    )
    site = fresh_site_packages(fresh_venv)
    assert os.path.realpath(got["file"]).startswith(site + os.sep), got
    assert got["version"] == hurray.__version__
    with open("/proc/self/maps") as f:  # not the test venv's library
        assert os.path.realpath(got["lib"]) not in f.read()


def test_hurray_config_flags_compile_and_run_a_c_program(
    fresh_venv: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    config = fresh_venv / "bin" / "hurray-config"
    assert config.is_file(), "the console script was not installed"
    flags = run([config, "--cflags", "--libs"], env=clean_env()).split()
    exe = tmp_path / "consumer"
    run([compiler(), CONSUMER_C, "-o", exe, *flags, "-ldl"])
    version, _, loaded = run([exe]).split()
    assert version == hurray.__version__
    libfile = run([config, "--libfiles"], env=clean_env()).strip()
    assert os.path.realpath(loaded) == os.path.realpath(libfile)
    assert os.path.realpath(libfile).startswith(fresh_site_packages(fresh_venv) + os.sep)


def test_pkg_config_entry_point_resolves_to_a_relocatable_hurray_pc(
    fresh_venv: pathlib.Path,
) -> None:
    probe = (
        "import importlib, importlib.metadata as m, json\n"
        "eps = [e for e in m.entry_points(group='pkg_config') if e.name == 'hurray']\n"
        "mod = importlib.import_module(eps[0].value) if eps else None\n"
        "print(json.dumps({'values': [e.value for e in eps],\n"
        "                  'dist': [e.dist.name for e in eps if e.dist],\n"
        "                  'path': list(mod.__path__) if mod else None}))\n"
    )
    got = json.loads(run([fresh_venv / "bin" / "python", "-c", probe], env=clean_env()))
    assert got["values"] == ["hurray.lib.pkgconfig"] and got["dist"] == ["libhurray"], got
    (folder,) = got["path"]
    site = fresh_site_packages(fresh_venv)
    assert os.path.realpath(folder) == os.path.join(site, "hurray", "lib", "pkgconfig")
    assert os.path.isfile(os.path.join(folder, "hurray.pc"))
    if shutil.which("pkg-config") is None:
        pytest.skip("pkg-config is not installed")
    env = dict(clean_env(), PKG_CONFIG_PATH=folder)
    var = {
        v: os.path.realpath(run(["pkg-config", f"--variable={v}", "hurray"], env=env).strip())
        for v in ("prefix", "includedir", "libdir")
    }
    assert var == {
        "prefix": site,
        "includedir": os.path.join(site, "hurray", "include"),
        "libdir": os.path.join(site, "hurray", "lib"),
    }, var


def test_pkgconf_from_pypi_finds_hurray_through_the_entry_point(tmp_path: pathlib.Path) -> None:
    """The `pkgconf` distribution's pkg-config adds every pkg_config entry
    point's folder to its search path: with no PKG_CONFIG_PATH it finds the
    installed wheel's hurray.pc, and the flags build a working program."""
    pytest.importorskip("pkgconf", reason="the pkgconf distribution is not installed")
    env = {k: v for k, v in os.environ.items() if k != "PKG_CONFIG_PATH"}
    flags = run([sys.executable, "-m", "pkgconf", "--cflags", "--libs", "hurray"], env=env).split()
    inc = [f[2:] for f in flags if f.startswith("-I")]
    assert [os.path.realpath(p) for p in inc] == [os.path.realpath(hurray.get_include())], flags
    exe = tmp_path / "consumer"
    run([compiler(), CONSUMER_C, "-o", exe, *flags, f"-Wl,-rpath,{hurray.get_lib_dir()}", "-ldl"])
    assert os.path.realpath(run([exe]).split()[2]) == os.path.realpath(hurray.get_library())


def test_hurray_config_in_this_venv_answers_as_python_m_hurray() -> None:
    script = os.path.join(sysconfig.get_path("scripts"), "hurray-config")
    assert os.path.isfile(script)
    flags = [
        "--includedir",
        "--libdir",
        "--libfiles",
        "--libfile",
        "--cmakedir",
        "--pkgconfigdir",
        "--cflags",
        "--libs",
        "--version",
    ]
    out = run([script, *flags]).splitlines()
    assert out == run([sys.executable, "-m", "hurray", *flags]).splitlines()
    assert out == [
        hurray.get_include(),
        hurray.get_lib_dir(),
        hurray.get_library(),
        hurray.get_library(),
        hurray.get_cmake_dir(),
        hurray.get_pkgconfig_dir(),
        f"-I{hurray.get_include()}",
        f"-L{hurray.get_lib_dir()} -lhurray -Wl,-rpath,{hurray.get_lib_dir()}",
        hurray.__version__,
    ]
    for argv, code in (([], 2), (["--no-such-flag"], 2), (["--help"], 0)):
        r = subprocess.run([script, *argv], capture_output=True, text=True)
        assert r.returncode == code, (argv, r)
        assert "hurray-config" in (r.stderr if code else r.stdout)

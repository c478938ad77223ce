#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The one place that installs the Debian packages the build and the tests
# need. Every script that needs a system package calls it: tests/run_all.sh
# (its deps, fuzz and cross stages), tests/model/run.sh, tests/style/check.sh, bindings/run_tests.sh and
# python/scripts/env.sh (python/run_tests.sh and the examples' scripts).
#
#   bash tests/deps.sh SET...        install what is missing of each SET
#   bash tests/deps.sh --packages P...   install those of the packages P not installed
#
# SETs:
#   core      the compilers, clang-format-14, CMake, GoogleTest, Google
#             Benchmark, the HIP headers and Python with venv support (tests/run_all.sh's deps stage)
#   fuzz      clang's libFuzzer runtime (libclang-rt-<major>-dev) when
#             `clang++ -fsanitize=fuzzer` cannot link a program yet
#   bindings  Go, JDK 17, JUnit 5, Maven and the plugins bindings/java/pom.xml
#             names (for its offline build), each only when missing
#   python    CMake, g++, python3 (the Python module's build; the venv and
#             Python.h are python/scripts/env.sh's)
#   docs      Doxygen (docs/build.sh, the API reference)
#   style     what tests/style/check.sh runs: clang-format-14, Go (gofmt, and
#             go vet, whose cgo needs gcc) and python3 with venv support (ruff
#             itself comes from PyPI into the venv), each only when missing
#   cross     tests/cross/run.sh (the cross stage): Debian's cross compilers
#             for aarch64 and s390x (g++-aarch64-linux-gnu, g++-s390x-linux-gnu,
#             with their libc in /usr/<triplet>), qemu-user-static (qemu-aarch64-static,
#             qemu-s390x-static; run directly, no binfmt_misc registration),
#             GoogleTest's sources (googletest, /usr/src/googletest), CMake and Ninja
#   model     Spin and gcc for the Promela models of the lifetime protocol
#             (tests/model/run.sh, the model stage), each only when missing
#
# Nothing is installed that is there already, and with nothing missing it
# needs no privileges. Otherwise it runs apt-get (update, then install
# --no-install-recommends) as root, or through password-less sudo; without
# either it names the missing packages and exits 1.
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive

deps_log() { printf 'tests/deps.sh: %s\n' "$*" >&2; }

# is_installed PACKAGE: dpkg says it is installed.
is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# install_packages P...: apt-get install of those not installed yet.
install_packages() {
  local missing=() p sudo=()
  for p in "$@"; do is_installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    deps_log "missing: ${missing[*]} (no apt-get here: install them first)"
    return 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      deps_log "not root and no password-less sudo: install ${missing[*]} first"
      return 1
    fi
  fi
  deps_log "apt: installing ${missing[*]}"
  "${sudo[@]}" apt-get update -q >&2 &&
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
    { deps_log "apt-get install ${missing[*]} failed"; return 1; }
}

set_core() {
  install_packages cmake ninja-build gcc g++ clang clang-format-14 binutils pkg-config \
    libgtest-dev libgmock-dev libbenchmark-dev libamdhip64-dev \
    python3 python3-venv python3-pip || return 1
  cmake --version | head -n 1
  g++ --version | head -n 1
}

set_docs() { install_packages doxygen; }

# The libFuzzer runtime, probed by linking an empty fuzz target.
set_fuzz() {
  install_packages clang || return 1
  local probe rc=0 major
  probe=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char *, unsigned long) { return 0; }\n' \
    > "$probe/p.cc"
  if ! clang++ -fsanitize=fuzzer "$probe/p.cc" -o "$probe/p" 2>/dev/null; then
    major=$(clang++ -dumpversion | cut -d. -f1)
    deps_log "libFuzzer runtime missing"
    install_packages "libclang-rt-$major-dev" || rc=1
  fi
  rm -rf "$probe"
  return "$rc"
}

set_bindings() {
  local need=() p
  command -v go >/dev/null || need+=(golang-go)
  { command -v javac >/dev/null && javac -version 2>&1 | grep -q ' 17\.'; } || need+=(openjdk-17-jdk-headless)
  [ -f /usr/share/java/junit-platform-console-standalone.jar ] || need+=(junit5)
  command -v mvn >/dev/null || need+=(maven)
  for p in maven-compiler-plugin/3.10.1 maven-surefire-plugin/2.22.3 maven-jar-plugin/3.3.0 \
           maven-resources-plugin/3.3.0; do
    [ -d "/usr/share/maven-repo/org/apache/maven/plugins/$p" ] || {
      need+=(libmaven-compiler-plugin-java libsurefire-java libmaven-jar-plugin-java
             libmaven-resources-plugin-java); break; }
  done
  [ ${#need[@]} -eq 0 ] || install_packages "${need[@]}"
}

set_style() {
  local need=()
  command -v clang-format-14 >/dev/null 2>&1 || need+=(clang-format-14)
  command -v go >/dev/null 2>&1 || need+=(golang-go)
  command -v gcc >/dev/null 2>&1 || need+=(gcc)
  python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3 python3-venv)
  [ ${#need[@]} -eq 0 ] || install_packages "${need[@]}"
}

set_model() {
  local need=()
  command -v spin >/dev/null 2>&1 || need+=(spin)
  command -v gcc >/dev/null 2>&1 || need+=(gcc)
  [ ${#need[@]} -eq 0 ] || install_packages "${need[@]}"
}

set_cross() {
  install_packages cmake ninja-build googletest g++-aarch64-linux-gnu g++-s390x-linux-gnu \
    qemu-user-static
}

set_python() {
  local need=()
  command -v cmake >/dev/null 2>&1 || need+=(cmake)
  command -v g++ >/dev/null 2>&1 || need+=(g++)
  command -v python3 >/dev/null 2>&1 || need+=(python3)
  [ ${#need[@]} -eq 0 ] || install_packages "${need[@]}"
}

[ $# -gt 0 ] || { deps_log "usage: bash tests/deps.sh SET... | --packages PACKAGE..."; exit 2; }
if [ "$1" = --packages ]; then
  shift
  install_packages "$@"
  exit
fi
rc=0
for set in "$@"; do
  case "$set" in
    core|fuzz|bindings|python|style|docs|cross|model) "set_$set" || rc=1 ;;
    *) deps_log "unknown set '$set' (known: core fuzz bindings python style docs cross model)"; rc=2 ;;
  esac
done
exit "$rc"

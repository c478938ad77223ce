#!/usr/bin/env bash
# Tests of the Go and Java bindings (and their interop test).
#
#   bash bindings/run_tests.sh [prefix]      (default: build/prefix)
#
# prefix is an INSTALLED libhurray (cmake --install of a build, the way users
# get it): headers in prefix/include, the library in prefix/lib. When it has
# no library yet, the script makes one as the README tells users to: a
# Release build with the tests off in build/lib, installed into prefix.
# Installs the Debian toolchains when missing (golang-go, openjdk-17-jdk-headless,
# junit5; as root with apt-get, or with password-less sudo), then builds and runs:
#   go      go test -race ./... in bindings/go (no network: standard library only),
#           again with HURRAY_CHECK=1, and the interop consumer loaded with dlopen
#           by a C host (interop/dlopenhost) for the fresh-thread check
#   java    the JNI library, the classes and JUnit 5 (console launcher), with
#           InteropTest loading the Go consumer (go build -buildmode=c-shared)
# Everything it builds goes under build/bindings/. Exits non-zero on any
# failure and when a suite ran no test.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
prefix="${1:-$repo/build/prefix}"
case "$prefix" in /*) ;; *) prefix="$repo/$prefix" ;; esac
out="$repo/build/bindings"
export DEBIAN_FRONTEND=noninteractive
log() { printf 'bindings/run_tests.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# --- toolchains -------------------------------------------------------------
need=()
command -v go >/dev/null || need+=(golang-go)
{ command -v javac >/dev/null && javac -version 2>&1 | grep -q ' 17\.'; } || need+=(openjdk-17-jdk-headless)
[ -f /usr/share/java/junit-platform-console-standalone.jar ] || need+=(junit5)
if [ ${#need[@]} -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null || die "not root: install ${need[*]} first"
    sudo=(sudo -n)
  fi
  log "apt: installing ${need[*]}"
  "${sudo[@]}" apt-get update -q >&2 && "${sudo[@]}" apt-get install -y -q --no-install-recommends "${need[@]}" >&2 \
    || die "apt-get install ${need[*]} failed"
fi
JAVA_HOME="${JAVA_HOME:-$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")}"
JUNIT=/usr/share/java/junit-platform-console-standalone.jar
go version; "$JAVA_HOME/bin/javac" -version

# --- libhurray (installed) --------------------------------------------------
libdir="$prefix/lib"
# The SONAME file, libhurray.so.M.m.
soname_file() { ls "$libdir"/libhurray.so.* 2>/dev/null | awk -F/ 'split($NF, p, ".") == 4' | head -n 1; }
lib=$(soname_file)
if [ -z "$lib" ]; then
  log "installing a Release libhurray into $prefix (build tree $repo/build/lib)"
  cmake -S "$repo" -B "$repo/build/lib" -DCMAKE_BUILD_TYPE=Release -DHURRAY_BUILD_TESTS=OFF >&2 \
    || die "cmake configure failed"
  cmake --build "$repo/build/lib" -j "${HURRAY_JOBS:-2}" >&2 || die "building libhurray failed"
  cmake --install "$repo/build/lib" --prefix "$prefix" >&2 || die "cmake --install failed"
  lib=$(soname_file)
fi
[ -f "$lib" ] || die "no libhurray.so.M.m under $libdir"
mkdir -p "$out"
rc=0

# --- Go ---------------------------------------------------------------------
# cgo finds libhurray through the install's hurray.pc (the README's way); the
# rpath lets the test binaries and the consumer find $prefix/lib at run time.
export GOPATH="$out/go/path" GOCACHE="$out/go/cache" GOFLAGS= GO111MODULE=on GOPROXY=off GOTOOLCHAIN=local
export CGO_ENABLED=1 PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
unset CGO_CFLAGS
export CGO_LDFLAGS="-Wl,-rpath,$libdir"
(cd "$here/go" && go vet ./...) || { log "go vet failed"; rc=1; }
(cd "$here/go" && go test -race -count=1 ./... 2>&1) | tee "$out/go-test.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
grep -Eq '^ok[[:space:]]+hurray[[:space:]]' "$out/go-test.log" || { log "go test ran no tests of package hurray"; rc=1; }
# Once more under libhurray's checking mode (it puts handle ids in user_data).
(cd "$here/go" && HURRAY_CHECK=1 go test -count=1 ./... 2>&1) | tee "$out/go-test-check.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { log "go test under HURRAY_CHECK=1 failed"; rc=1; }
grep -Eq '^ok[[:space:]]+hurray[[:space:]]' "$out/go-test-check.log" \
  || { log "go test under HURRAY_CHECK=1 ran no tests of package hurray"; rc=1; }
(cd "$here/go" && go build -buildmode=c-shared -o "$out/libhurray_go_consumer.so" ./interop/consumer) \
  || { log "building the Go interop consumer failed"; rc=1; }
# The consumer loaded with dlopen (as a JVM or Python loads a Go library): a
# Share as the first libhurray call on fresh threads, every field checked.
if gcc -std=c11 -O2 -Wall -Wextra -Werror "$here/go/interop/dlopenhost/host.c" -ldl -o "$out/go_dlopen_host" \
  && [ -f "$out/libhurray_go_consumer.so" ]; then
  "$out/go_dlopen_host" "$out/libhurray_go_consumer.so" 8 4 || { log "the dlopen'ed Go consumer failed its fresh-thread check"; rc=1; }
else
  log "building the Go dlopen host failed"; rc=1
fi

# --- Java -------------------------------------------------------------------
jinc=(-I"$JAVA_HOME/include" -I"$JAVA_HOME/include/linux" -I"$prefix/include")
cflags=(-std=c11 -O2 -g -Wall -Wextra -Werror -fPIC -shared)
java_ok=1
gcc "${cflags[@]}" "${jinc[@]}" "$here/java/src/main/c/hurray_jni.c" -L"$libdir" -lhurray \
  -o "$out/libhurray_jni.so" || java_ok=0
gcc "${cflags[@]}" "${jinc[@]}" -I"$here/testprod" "$here/java/src/test/c/testprod_jni.c" \
  "$here/testprod/testprod.c" -ldl -o "$out/libhurray_testprod_jni.so" || java_ok=0
rm -rf "$out/java/classes" "$out/java/test-classes"
"$JAVA_HOME/bin/javac" -Xlint:all -Werror -d "$out/java/classes" \
  $(find "$here/java/src/main/java" -name '*.java') || java_ok=0
"$JAVA_HOME/bin/javac" -Xlint:all,-processing -d "$out/java/test-classes" -cp "$out/java/classes:$JUNIT" \
  $(find "$here/java/src/test/java" -name '*.java') || java_ok=0
if [ "$java_ok" = 1 ]; then
  go_consumer=""
  [ -f "$out/libhurray_go_consumer.so" ] && go_consumer="$out/libhurray_go_consumer.so"
  # libjsig chains the JVM's signal handlers with those the Go runtime installs
  # when the Go consumer is loaded into this JVM (InteropTest).
  LD_PRELOAD="$JAVA_HOME/lib/libjsig.so" "$JAVA_HOME/bin/java" -Xcheck:jni \
    -Dhurray.library="$lib" -Dhurray.jni.library="$out/libhurray_jni.so" \
    -Dhurray.testprod.library="$out/libhurray_testprod_jni.so" \
    -Dhurray.go.consumer="$go_consumer" \
    -jar "$JUNIT" --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests \
    --class-path "$out/java/classes:$out/java/test-classes" --select-package dev.hurray \
    2>&1 | tee "$out/java-test.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
else
  log "building the Java binding or its tests failed"; rc=1
fi
exit "$rc"

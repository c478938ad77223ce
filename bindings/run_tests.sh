#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests of the Go and Java bindings (and their interop test).
#
#   bash bindings/run_tests.sh [prefix]      (default: build/prefix)
#
# prefix is an INSTALLED libhurray (cmake --install of a build, the way users
# get it): headers in prefix/include, the library in prefix/lib. When it has
# no library yet, the script makes one as the README tells users to: a
# Release build with the tests off in build/lib, installed into prefix.
# Installs the Debian toolchains when missing (tests/deps.sh bindings: Go,
# JDK 17, JUnit 5, Maven and the plugins pom.xml names), then builds and runs:
#   go      go test -race ./... in bindings/go (no network: standard library only),
#           again with HURRAY_CHECK=1, the interop consumer loaded with dlopen
#           by a C host (interop/dlopenhost) for the fresh-thread check, and
#           the Go steps of bindings/go/README.md and docs/impl/go.md's quick start in a
#           new module outside the checkout (offline)
#   java    the JNI library, the classes and JUnit 5 (console launcher), with
#           InteropTest loading the Go consumer (go build -buildmode=c-shared);
#           four JUnit runs: the suite, InteropTest alone, the suite in random
#           class and method order (HURRAY_JAVA_SEED=n repeats one), the suite
#           with HURRAY_CHECK=1; the Maven build (bindings/java/pom.xml,
#           offline from /usr/share/maven-repo: jar and the suite under
#           Surefire) by bindings/java/README.md's Maven command, as written;
#           ShareCloseBench short (prints ns/op, no threshold);
#           then bindings/java/README.md's Java steps and docs/impl/java.md's quick
#           start, as written, each on its program from a temporary directory
#           against the prefix
# Everything it builds goes under build/bindings/. Exits non-zero on any
# failure and when a suite ran no test.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
prefix="${1:-$repo/build/prefix}"
case "$prefix" in /*) ;; *) prefix="$repo/$prefix" ;; esac
out="$repo/build/bindings"
log() { printf 'bindings/run_tests.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# --- toolchains -------------------------------------------------------------
bash "$repo/tests/deps.sh" bindings || die "the Go and Java toolchains are missing (tests/deps.sh bindings)"
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
gomod=github.com/libhurray/libhurray/bindings/go
grep -Eq "^ok[[:space:]]+$gomod[[:space:]]" "$out/go-test.log" || { log "go test ran no tests of package hurray"; rc=1; }
# Once more under libhurray's checking mode (it puts handle ids in user_data).
(cd "$here/go" && HURRAY_CHECK=1 go test -count=1 ./... 2>&1) | tee "$out/go-test-check.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || { log "go test under HURRAY_CHECK=1 failed"; rc=1; }
grep -Eq "^ok[[:space:]]+$gomod[[:space:]]" "$out/go-test-check.log" \
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

# The Go steps of bindings/go/README.md ("Using it from Go") and of docs/impl/go.md's
# quick start, literally, in a new module outside the checkout (an empty
# temporary directory) against the install, with no network (GOPROXY=off;
# -mod=mod lets go.mod be completed from the replace): the indented shell
# block is run with P (the prefix) and R (this checkout) set, next to the
# section's ```go block saved as main.go. Its deferred CheckReport must
# list nothing; where the steps set HURRAY_CHECK=stderr (the quick start) it
# must print the checking mode's summary line saying so.
# readme_go FILE HEADING NAME [ENV...]
readme_go() {
  local file=$1 heading=$2 name=$3 tmp steps
  shift 3
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/hurray-$name.XXXXXX") || return 1
  steps=$(awk -v h="$heading" '$0 == h {s = 1; next} s && /^## / {exit}
               s && /^    / {sub(/^    /, ""); print}' "$file")
  awk -v h="$heading" '$0 == h {s = 1; next} s && /^## / {exit}
                 s && /^```go$/ {j = 1; next} j && /^```$/ {exit} j' "$file" > "$tmp/main.go"
  [ -n "$steps" ] && [ -s "$tmp/main.go" ] || { log "$file: no Go steps or program under '$heading'"; return 1; }
  printf '%s\n' "$steps" > "$tmp/steps.sh"
  (cd "$tmp" && env -u LD_LIBRARY_PATH -u CGO_LDFLAGS -u PKG_CONFIG_PATH GOFLAGS=-mod=mod "$@" \
     P="$prefix" R="$repo" bash -euo pipefail steps.sh) 2>&1 | tee "$out/$name.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] && grep -qx 'hurray Go example: sum 15' "$out/$name.log" \
    && ! grep -Eq '(^|[^0-9])[1-9][0-9]* handle\(s\) still live' "$out/$name.log" \
    || { log "the Go steps of $file failed (in $tmp; log $out/$name.log)"; return 1; }
  if grep -q 'HURRAY_CHECK=stderr' "$tmp/steps.sh"; then
    grep -Fqx 'hurray check: 0 handle(s) still live at exit, 0 double release(s) caught' "$out/$name.log" \
      || { log "the Go steps of $file under HURRAY_CHECK=stderr printed no summary line (log $out/$name.log)"; return 1; }
  fi
  log "$(basename "$file") Go steps: ok (a new module in $tmp)"
  rm -rf "$tmp"
}
readme_go "$repo/bindings/go/README.md" "## Using it from Go" readme-go || rc=1
readme_go "$repo/docs/impl/go.md" "## Quick start" go-quickstart || rc=1

# --- Java -------------------------------------------------------------------
jinc=(-I"$JAVA_HOME/include" -I"$JAVA_HOME/include/linux" -I"$prefix/include")
cflags=(-std=c11 -O2 -g -Wall -Wextra -Werror -fPIC -shared)
java_ok=1
# RUNPATH $ORIGIN:$ORIGIN/../lib: libhurray next to the JNI library, or in
# the lib/ of the prefix it is installed in, is found without a property.
gcc "${cflags[@]}" "${jinc[@]}" "$here/java/src/main/c/hurray_jni.c" -L"$libdir" -lhurray \
  -Wl,-rpath,'$ORIGIN:$ORIGIN/../lib' -o "$out/libhurray_jni.so" || java_ok=0
gcc "${cflags[@]}" "${jinc[@]}" -I"$repo/tests/dlpack_producer" "$here/java/src/test/c/testprod_jni.c" \
  "$repo/tests/dlpack_producer/dlpack_producer.c" -ldl -o "$out/libhurray_testprod_jni.so" || java_ok=0
rm -rf "$out/java/classes" "$out/java/test-classes"
"$JAVA_HOME/bin/javac" -Xlint:all -Werror -d "$out/java/classes" \
  $(find "$here/java/src/main/java" -name '*.java') || java_ok=0
"$JAVA_HOME/bin/javac" -Xlint:all,-processing -d "$out/java/test-classes" -cp "$out/java/classes:$JUNIT" \
  $(find "$here/java/src/test/java" -name '*.java') || java_ok=0
go_consumer=""
[ -f "$out/libhurray_go_consumer.so" ] && go_consumer="$out/libhurray_go_consumer.so"

# junit LOG [ARG...]: one JUnit run (in a JVM of its own) against the
# installed libhurray; extra ARGs go to the console launcher, the
# environment variable HURRAY_GO_CONSUMER (default: the Go interop consumer
# built above, empty: InteropTest is skipped) to the JVM. Fails unless the
# launcher passed and its summary has no failed and no aborted test. libjsig
# chains the JVM's signal handlers with those the Go runtime installs when
# the Go consumer is loaded into this JVM (InteropTest). -Xmx2g keeps the
# heap too small for share(2^31 - 2)'s long[] on any machine (that test
# needs the refusal).
junit() {
  local name=$1; shift
  LD_PRELOAD="$JAVA_HOME/lib/libjsig.so" "$JAVA_HOME/bin/java" -Xmx2g -Xcheck:jni \
    -Dhurray.library="$lib" -Dhurray.jni.library="$out/libhurray_jni.so" \
    -Dhurray.testprod.library="$out/libhurray_testprod_jni.so" \
    -Dhurray.go.consumer="${HURRAY_GO_CONSUMER-$go_consumer}" \
    -jar "$JUNIT" --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests \
    --class-path "$out/java/classes:$out/java/test-classes" "$@" \
    2>&1 | tee "$out/$name.log"
  local st=${PIPESTATUS[0]}
  [ "$st" -eq 0 ] && grep -Eq '^\[ +0 tests failed' "$out/$name.log" \
    && grep -Eq '^\[ +0 tests aborted' "$out/$name.log" \
    || { log "JUnit run $name failed (exit $st; log $out/$name.log)"; return 1; }
  log "JUnit run $name: $(sed -n 's/^\[ *\([0-9]*\) tests successful.*/\1/p' "$out/$name.log") tests successful"
}

if [ "$java_ok" = 1 ]; then
  # 1. The whole suite, in JUnit's default order (tests/run_all.sh reads this log).
  junit java-test --select-package dev.hurray || rc=1
  # 2. The interop test alone (no earlier test may warm a thread for it), and
  # 3. the whole suite with classes and methods in random order (the seed is
  # printed; HURRAY_JAVA_SEED repeats an order).
  if [ -n "$go_consumer" ]; then
    junit java-test-interop-alone --select-class dev.hurray.InteropTest || rc=1
    grep -Eq '^\[ +1 tests successful' "$out/java-test-interop-alone.log" \
      || { log "InteropTest alone did not run its test"; rc=1; }
  else
    log "no Go interop consumer: InteropTest not run"; rc=1
  fi
  seed="${HURRAY_JAVA_SEED:-$((RANDOM * 32768 + RANDOM))}"
  log "JUnit random order, seed $seed (HURRAY_JAVA_SEED=$seed repeats it)"
  junit java-test-random --select-package dev.hurray \
    --config=junit.jupiter.testclass.order.default='org.junit.jupiter.api.ClassOrderer$Random' \
    --config=junit.jupiter.testmethod.order.default='org.junit.jupiter.api.MethodOrderer$Random' \
    --config=junit.jupiter.execution.order.random.seed="$seed" || rc=1
  # 4. The whole suite once more with libhurray's checking mode on.
  # CheckingModeTest runs only here: it checks that the mode is on in the JVM.
  HURRAY_CHECK=1 junit java-test-check --select-package dev.hurray || rc=1
  grep -q 'javaHandlesAreTrackedAndReleasedOnce() ✔' "$out/java-test-check.log" \
    || { log "CheckingModeTest did not pass under HURRAY_CHECK=1"; rc=1; }
  # 5. The Maven build (bindings/java/pom.xml), offline from Debian's
  # packaged plugins: the indented block of bindings/java/README.md's "The
  # jar, with Maven", as written, from the checkout's root (no -D options:
  # the tests build their JNI libraries against build/prefix themselves,
  # NativeLibs.java). The jar's manifest must name the module, and the suite
  # must run under Surefire with at most InteropTest (no Go consumer given)
  # and CheckingModeTest (no HURRAY_CHECK) skipped.
  if command -v mvn >/dev/null; then
    mvn_steps=$(awk '$0 == "## The jar, with Maven" {s = 1; next} s && /^#/ {exit}
                     s && /^```/ {f = !f; next} s && !f && /^    / {sub(/^    /, ""); print}' \
                  "$here/java/README.md")
    [ -n "$mvn_steps" ] || log "bindings/java/README.md: no Maven command under '## The jar, with Maven'"
    (cd "$repo" && env -u LD_LIBRARY_PATH -u HURRAY_CHECK bash -euo pipefail -c "$mvn_steps" 2>&1) \
      > "$out/java-maven.log"
    mvn_st=$?
    [ -n "$mvn_steps" ] || mvn_st=1
    grep -aE '(Tests run:|BUILD|native tests skipped)' "$out/java-maven.log" | sed 's/\x1b\[[0-9;]*m//g'
    # Surefire's totals line (colours stripped): Tests run: N, Failures: F, Errors: E, Skipped: S
    mvn_totals=$(sed 's/\x1b\[[0-9;]*m//g' "$out/java-maven.log" \
      | sed -n 's/^\[[A-Z]*\] Tests run: \([0-9]*\), Failures: \([0-9]*\), Errors: \([0-9]*\), Skipped: \([0-9]*\)$/\1 \2 \3 \4/p' | tail -n 1)
    read -r mvn_run mvn_fail mvn_err mvn_skip <<< "${mvn_totals:-0 0 0 0}"
    if [ "$mvn_st" -ne 0 ] || ! grep -aq 'BUILD SUCCESS' "$out/java-maven.log"; then
      log "the Maven build as bindings/java/README.md writes it failed (log $out/java-maven.log)"; rc=1
    elif [ "$mvn_run" -lt 20 ] || [ "$mvn_fail" -ne 0 ] || [ "$mvn_err" -ne 0 ] || [ "$mvn_skip" -gt 2 ]; then
      log "the Maven build's tests: ${mvn_totals:-no totals} (run failed errors skipped; want 0 failed and at most 2 skipped; log $out/java-maven.log)"; rc=1
    # Named by the manifest's Automatic-Module-Name (from the file name it
    # would be "hurray").
    elif ! "$JAVA_HOME/bin/jar" --describe-module --file "$out/maven/hurray-0.1.0.jar" \
        | grep -q '^dev\.hurray@0\.1\.0 automatic$'; then
      log "the Maven jar's module is not dev.hurray (Automatic-Module-Name)"; rc=1
    else
      log "Maven build as bindings/java/README.md writes it: $mvn_run tests run, $mvn_skip skipped, jar $out/maven/hurray-0.1.0.jar"
    fi
  else
    log "no mvn: the Maven build not run"; rc=1
  fi
  # 6. The share(1)+close benchmark, short (numbers only, no threshold).
  "$JAVA_HOME/bin/java" -Dhurray.library="$lib" -Dhurray.jni.library="$out/libhurray_jni.so" \
    -cp "$out/java/classes:$out/java/test-classes" dev.hurray.ShareCloseBench short \
    || { log "ShareCloseBench failed"; rc=1; }
else
  log "building the Java binding or its tests failed"; rc=1
fi

# 7. the Java steps of bindings/java/README.md ("Using it from Java") and docs/impl/java.md's
# "Quick start", literally, each from an empty temporary directory against
# the install: the section's indented shell block (up to the next heading,
# outside fenced code) is run with P (the prefix) and R (this checkout) set,
# on App.java, the section's ```java block saved unchanged; it must print
# the line the doc shows.
# readme_java NAME FILE HEADING
readme_java() {
  local name=$1 file=$2 heading=$3 tmp steps
  tmp=$(mktemp -d "$out/$name.XXXXXX") || return 1
  steps=$(awk -v h="$heading" '$0 == h {s = 1; next} s && /^#/ {exit}
               s && /^```/ {f = !f; next} s && !f && /^    / {sub(/^    /, ""); print}' "$file")
  awk -v h="$heading" '$0 == h {s = 1; next} s && /^#/ {exit}
                 s && /^```java$/ {j = 1; next} j && /^```$/ {exit} j' "$file" > "$tmp/App.java"
  [ -n "$steps" ] && [ -s "$tmp/App.java" ] || { log "$file: no Java steps or program under '$heading'"; return 1; }
  grep -Fq "It prints \`$java_line\`" "$file" || { log "$file does not say the program prints '$java_line'"; return 1; }
  printf '%s\n' "$steps" > "$tmp/steps.sh"
  (cd "$tmp" && env -u LD_LIBRARY_PATH P="$prefix" R="$repo" bash -euo pipefail steps.sh) 2>&1 \
    | tee "$out/$name.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] && grep -Fqx "$java_line" "$out/$name.log" \
    || { log "the Java steps of $file '$heading' failed (in $tmp; log $out/$name.log)"; return 1; }
  log "Java steps of $(basename "$file") '$heading': ok (in $tmp)"
  rm -rf "$tmp"
}
java_line='hurray Java example: [2, 3] 42.0 1.0'
readme_java readme-java "$repo/bindings/java/README.md" '## Using it from Java' || rc=1
readme_java quickstart-java "$repo/docs/impl/java.md" '## Quick start' || rc=1
exit "$rc"

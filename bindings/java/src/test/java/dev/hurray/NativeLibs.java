// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * Finds or builds the native libraries the tests load, so that a plain
 * {@code mvn -o -Dmaven.repo.local=/usr/share/maven-repo package} in
 * bindings/java tests the jar with no -D options (bindings/java/README.md).
 * Every test class that loads them is annotated {@code @ExtendWith(NativeLibs.class)};
 * the work is done once per JVM, before the first such class runs.
 *
 * <p>When both {@code hurray.jni.library} and {@code hurray.testprod.library}
 * are set (bindings/run_tests.sh sets them), nothing is done. Otherwise:
 *
 * <ol>
 *   <li>libhurray: the install prefix {@code hurray.prefix} names, else the
 *       checkout's {@code build/prefix} (where bindings/run_tests.sh and the
 *       test command install it); when that holds no library, it is built and
 *       installed there as README.md's "Building only the library" says
 *       (cmake, Release, tests off; build tree {@code build/lib});
 *   <li>the JNI library (src/main/c/hurray_jni.c) and the test producer's
 *       (src/test/c/testprod_jni.c with tests/dlpack_producer) are compiled
 *       with gcc into {@code <build directory>/native}, linked against that
 *       libhurray with an rpath to it;
 *   <li>{@code hurray.library}, {@code hurray.jni.library} and
 *       {@code hurray.testprod.library} are set to those files.
 * </ol>
 *
 * What cannot be found or built (no cmake, no gcc, no jni.h, a failed
 * build) skips the annotated classes with a message naming it, printed once
 * to standard error, instead of failing each test with a bare error.
 */
final class NativeLibs implements BeforeAllCallback {
  private static String problem; // why the libraries are not there; null when they are
  private static boolean done;

  @Override
  public void beforeAll(ExtensionContext context) {
    String why = ensure();
    Assumptions.assumeTrue(why == null, () -> "dev.hurray native tests skipped: " + why);
  }

  /** Sets the properties once; returns null, or why the libraries are missing. */
  static synchronized String ensure() {
    if (!done) {
      done = true;
      if (!isSet("hurray.jni.library") || !isSet("hurray.testprod.library")) {
        try {
          problem = findOrBuild();
        } catch (IOException e) {
          problem = e.toString();
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          problem = e.toString();
        }
        if (problem != null) {
          System.err.println("dev.hurray native tests skipped: " + problem);
        }
      }
    }
    return problem;
  }

  private static boolean isSet(String property) {
    String v = System.getProperty(property);
    return v != null && !v.isEmpty();
  }

  private static void log(String msg) {
    System.err.println("dev.hurray tests: " + msg);
  }

  /** bindings/java (the pom's directory): from the pom, else the working directory. */
  private static Path javaDir() {
    String d = System.getProperty("hurray.java.dir");
    return Paths.get(d != null && !d.isEmpty() ? d : System.getProperty("user.dir"))
        .toAbsolutePath()
        .normalize();
  }

  /** The SONAME file libhurray.so.M.m in lib, or null. */
  private static Path sonameFile(Path lib) throws IOException {
    if (!Files.isDirectory(lib)) {
      return null;
    }
    try (Stream<Path> s = Files.list(lib)) {
      return s.filter(p -> p.getFileName().toString().matches("libhurray\\.so\\.\\d+\\.\\d+"))
          .findFirst()
          .orElse(null);
    }
  }

  /** Runs a command, its output to standard error; returns null or what failed. */
  private static String run(Path dir, List<String> cmd) throws IOException, InterruptedException {
    log("running " + String.join(" ", cmd));
    Process p;
    try {
      p =
          new ProcessBuilder(cmd)
              .directory(dir.toFile())
              .redirectOutput(ProcessBuilder.Redirect.INHERIT)
              .redirectError(ProcessBuilder.Redirect.INHERIT)
              .start();
    } catch (IOException e) {
      return "cannot run " + cmd.get(0) + " (" + e.getMessage() + ")";
    }
    int st = p.waitFor();
    return st == 0 ? null : String.join(" ", cmd) + " failed (exit " + st + ")";
  }

  private static String findOrBuild() throws IOException, InterruptedException {
    Path javaDir = javaDir();
    Path repo = javaDir.resolve("../..").normalize();
    if (!Files.isRegularFile(javaDir.resolve("src/main/c/hurray_jni.c"))
        || !Files.isRegularFile(repo.resolve("tests/dlpack_producer/dlpack_producer.c"))) {
      return "the libhurray checkout is not found from " + javaDir
          + " (run Maven in bindings/java, or pass -Dhurray.jni.library and -Dhurray.testprod.library)";
    }
    // 1. libhurray, installed.
    Path prefix;
    if (isSet("hurray.prefix")) {
      prefix = Paths.get(System.getProperty("hurray.prefix")).toAbsolutePath().normalize();
      if (sonameFile(prefix.resolve("lib")) == null) {
        return "-Dhurray.prefix=" + prefix + " holds no lib/libhurray.so.M.m";
      }
    } else {
      prefix = repo.resolve("build/prefix");
      if (sonameFile(prefix.resolve("lib")) == null) {
        log("no libhurray in " + prefix + ": building it as README.md's \"Building only the library\""
            + " says (or pass -Dhurray.prefix=P, an installed libhurray)");
        String jobs = System.getenv().getOrDefault("HURRAY_JOBS", "2");
        String why = run(repo, List.of("cmake", "-S", ".", "-B", "build/lib",
            "-DCMAKE_BUILD_TYPE=Release", "-DHURRAY_BUILD_TESTS=OFF"));
        if (why == null) {
          why = run(repo, List.of("cmake", "--build", "build/lib", "-j", jobs));
        }
        if (why == null) {
          why = run(repo, List.of("cmake", "--install", "build/lib", "--prefix", prefix.toString()));
        }
        if (why != null) {
          return "building libhurray failed: " + why
              + " (it needs cmake and a C/C++ compiler; or pass -Dhurray.prefix=P)";
        }
      }
    }
    Path lib = sonameFile(prefix.resolve("lib"));
    if (lib == null || !Files.isRegularFile(prefix.resolve("include/hurray/hurray.h"))) {
      return "no installed libhurray (lib/libhurray.so.M.m and include/hurray/hurray.h) in " + prefix;
    }
    // 2. The two JNI libraries, with gcc.
    Path jdk = Paths.get(System.getProperty("java.home"));
    if (!Files.isRegularFile(jdk.resolve("include").resolve("jni.h"))) {
      return "no jni.h in " + jdk.resolve("include")
          + " (a JDK, not a JRE, must run the tests: openjdk-17-jdk-headless)";
    }
    String build = System.getProperty("hurray.build.dir");
    Path out = (build != null && !build.isEmpty() ? Paths.get(build) : repo.resolve("build/bindings/maven"))
        .resolve("native").toAbsolutePath().normalize();
    Files.createDirectories(out);
    List<String> common = List.of("gcc", "-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-Werror",
        "-fPIC", "-shared", "-I" + jdk.resolve("include"), "-I" + jdk.resolve("include").resolve("linux"),
        "-I" + prefix.resolve("include"));
    Path jni = out.resolve("libhurray_jni.so");
    List<String> cmd = new ArrayList<>(common);
    cmd.addAll(List.of(javaDir.resolve("src/main/c/hurray_jni.c").toString(),
        "-L" + prefix.resolve("lib"), "-lhurray", "-Wl,-rpath," + prefix.resolve("lib"),
        "-o", jni.toString()));
    String why = run(out, cmd);
    if (why != null) {
      return "building the JNI library failed: " + why;
    }
    Path testprod = out.resolve("libhurray_testprod_jni.so");
    Path producer = repo.resolve("tests/dlpack_producer");
    cmd = new ArrayList<>(common);
    cmd.addAll(List.of("-I" + producer, javaDir.resolve("src/test/c/testprod_jni.c").toString(),
        producer.resolve("dlpack_producer.c").toString(), "-ldl", "-o", testprod.toString()));
    why = run(out, cmd);
    if (why != null) {
      return "building the test producer's JNI library failed: " + why;
    }
    // 3. The properties dev.hurray.Native and TestProducer read.
    System.setProperty("hurray.library", lib.toString());
    System.setProperty("hurray.jni.library", jni.toString());
    System.setProperty("hurray.testprod.library", testprod.toString());
    log("libhurray " + lib + ", JNI libraries in " + out + File.separator);
    return null;
  }
}

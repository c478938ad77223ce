// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * After a failed load, every later use once said only
 * "NoClassDefFoundError: Could not initialize class dev.hurray.Native". Now
 * each use gets an UnsatisfiedLinkError that names the first load error and
 * carries it as the cause. Runs LoadFailureMain in a new JVM with a bogus
 * hurray.library.
 */
class LoadFailureTest {
  @Test
  void everyUseReportsTheFirstLoadError() throws Exception {
    String bogus = "/nonexistent/hurray-test/libhurray.so.0.1";
    String cp =
        Paths.get(HurrayBuffer.class.getProtectionDomain().getCodeSource().getLocation().toURI())
            + File.pathSeparator
            + Paths.get(
                LoadFailureMain.class.getProtectionDomain().getCodeSource().getLocation().toURI());
    String java = Paths.get(System.getProperty("java.home"), "bin", "java").toString();
    Process p =
        new ProcessBuilder(
                java, "-Dhurray.library=" + bogus, "-cp", cp, LoadFailureMain.class.getName())
            .redirectErrorStream(true)
            .start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(60, TimeUnit.SECONDS), "the JVM did not end");
    assertEquals(0, p.exitValue(), out);
    List<String> lines = out.lines().filter(l -> l.startsWith("use ")).toList();
    assertEquals(2, lines.size(), out);
    for (String l : lines) {
      assertTrue(l.contains(": java.lang.UnsatisfiedLinkError: "), l);
      assertTrue(l.contains("| cause java.lang.UnsatisfiedLinkError: "), l);
      assertTrue(l.endsWith(bogus) || l.contains(bogus), "the real cause is missing: " + l);
      assertTrue(!l.contains("Could not initialize"), l);
    }
  }
}

# SPDX-License-Identifier: Apache-2.0
# Runs the program of tests/checking/env_probe.c (hurray_check_env_probe) with
# HURRAY_CHECK=stderr and checks what the
# checking mode printed: the double release caught (the producer released
# once), the leak with where it was made, and the summary at exit.
#   cmake -DPROBE=<check_env_probe> [-DEMULATOR=<runner;args>] -P env_report.cmake
# EMULATOR runs the probe in a cross build (CMAKE_CROSSCOMPILING_EMULATOR).
cmake_minimum_required(VERSION 3.25)
set(ENV{HURRAY_CHECK} stderr)
execute_process(COMMAND ${EMULATOR} "${PROBE}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "stdout:\n${out}\nstderr:\n${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "probe exited with ${rc}")
endif()
foreach(pair
    "out|producer releases: 1\n"
    "err|hurray check: double release of handle #1 \\(made by hurray_share: kDLCPU 0"
    "err|first released at:"
    "err|hurray check: leak: handle #2 \\(made by hurray_share"
    "err|still live at exit\\.\n  made at:\n    [^\n]*check_env_probe_make"
    "err|hurray check: 1 handle\\(s\\) still live at exit, 1 double release\\(s\\) caught")
  string(FIND "${pair}" "|" bar)
  string(SUBSTRING "${pair}" 0 ${bar} stream)
  math(EXPR from "${bar} + 1")
  string(SUBSTRING "${pair}" ${from} -1 re)
  if(NOT "${${stream}}" MATCHES "${re}")
    message(FATAL_ERROR "std${stream} does not match: ${re}")
  endif()
endforeach()

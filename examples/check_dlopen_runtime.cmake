# SPDX-License-Identifier: Apache-2.0
# Checks of examples/dlopen_runtime.c that a plain ctest property cannot do.
#
#   cmake -DMODE=needed  -DEXE=<program> -DREADELF=<readelf> -P check_dlopen_runtime.cmake
#     The program links nothing of libhurray: no NEEDED entry names it.
#   cmake -DMODE=missing -DEXE=<program> -DBOGUS=<path> [-DEMULATOR=<runner;args>]
#         -P check_dlopen_runtime.cmake
#     Given a library path that does not exist, it exits non-zero and says
#     what it tried and why dlopen failed. EMULATOR runs the program in a
#     cross build (CMAKE_CROSSCOMPILING_EMULATOR).
cmake_minimum_required(VERSION 3.25)
if(NOT EXE)
  message(FATAL_ERROR "check_dlopen_runtime.cmake: EXE is not set")
endif()

if(MODE STREQUAL "needed")
  execute_process(COMMAND "${READELF}" -d "${EXE}" OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${READELF} -d ${EXE} failed (${rc})")
  endif()
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]\n]+\\]" lines "${dyn}")
  set(needed "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^.*\\[([^]]+)\\]$" "\\1" lib "${line}")
    list(APPEND needed "${lib}")
  endforeach()
  message(STATUS "NEEDED: ${needed}")
  if(NOT needed MATCHES "libc\\.so")
    message(FATAL_ERROR "no NEEDED libc.so: could not read the dynamic section of ${EXE}")
  endif()
  if(needed MATCHES "libhurray")
    message(FATAL_ERROR "${EXE} links libhurray (NEEDED ${needed}); it must only dlopen it")
  endif()
  message(STATUS "${EXE} does not link libhurray")
elseif(MODE STREQUAL "missing")
  execute_process(COMMAND ${EMULATOR} "${EXE}" "${BOGUS}"
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  message(STATUS "exit status ${rc}; stderr: ${err}")
  if(rc EQUAL 0)
    message(FATAL_ERROR "exited 0 although ${BOGUS} does not exist")
  endif()
  string(FIND "${err}" "could not load libhurray: tried dlopen(\"${BOGUS}\")" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "stderr does not say what was tried")
  endif()
  if(NOT err MATCHES "No such file or directory")
    message(FATAL_ERROR "stderr does not carry dlerror()'s reason")
  endif()
else()
  message(FATAL_ERROR "check_dlopen_runtime.cmake: MODE must be needed or missing")
endif()

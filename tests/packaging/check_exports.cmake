# SPDX-License-Identifier: Apache-2.0
# Checks the dynamic symbol table and the dynamic section of libhurray.so.
#
#   cmake -DLIB=<libhurray.so> -DNM=<nm> -DREADELF=<readelf>
#         -DHEADER_DIR=<include/hurray> -P check_exports.cmake
#
# 1. Every defined dynamic symbol is hurray_* and carries a HURRAY_* version
#    node (the only other defined entries allowed are those nodes).
# 2. Every function the public headers declare with HURRAY_API is exported.
# 3. The library has a SONAME, and no NEEDED entry names a CUDA, HIP/ROCm or
#    Python library: device runtimes are loaded at run time, never linked.
cmake_minimum_required(VERSION 3.25)
foreach(var LIB NM READELF HEADER_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "check_exports.cmake: ${var} is not set")
  endif()
endforeach()

set(failures "")

execute_process(COMMAND "${NM}" -D --defined-only "${LIB}"
  OUTPUT_VARIABLE nm_out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIB} failed (${rc})")
endif()

string(REPLACE "\n" ";" nm_lines "${nm_out}")
set(exported "")
foreach(line IN LISTS nm_lines)
  if(line STREQUAL "")
    continue()
  endif()
  # "<address> <type> <name>[@@<version>]"
  if(NOT line MATCHES "^[0-9a-fA-F]* *([A-Za-z]) (.+)$")
    list(APPEND failures "unparsed nm line: ${line}")
    continue()
  endif()
  set(type "${CMAKE_MATCH_1}")
  set(sym "${CMAKE_MATCH_2}")
  if(type STREQUAL "A" AND sym MATCHES "^HURRAY_[0-9A-Za-z_.]+$")
    continue() # the version node itself
  endif()
  if(sym MATCHES "^(hurray_[0-9a-z_]+)@@?HURRAY_[0-9A-Za-z_.]+$")
    list(APPEND exported "${CMAKE_MATCH_1}")
  elseif(sym MATCHES "^hurray_")
    list(APPEND failures "exported without a version node: ${sym}")
  else()
    list(APPEND failures "exported symbol outside the hurray_ prefix: ${sym}")
  endif()
endforeach()
list(LENGTH exported n_exported)
if(n_exported EQUAL 0)
  list(APPEND failures "no hurray_* symbol is exported at all")
endif()

file(GLOB headers "${HEADER_DIR}/*.h")
set(declared "")
foreach(header IN LISTS headers)
  file(READ "${header}" text)
  # Strip comments so that prose mentioning HURRAY_API does not count.
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" text "${text}")
  string(REGEX REPLACE "//[^\n]*" "" text "${text}")
  string(REGEX MATCHALL "HURRAY_API[^;{}#(]*[ *\n](hurray_[0-9a-z_]+)[ \n]*\\(" decls "${text}")
  foreach(decl IN LISTS decls)
    string(REGEX MATCH "hurray_[0-9a-z_]+[ \n]*\\($" name "${decl}")
    string(REGEX REPLACE "[ \n]*\\($" "" name "${name}")
    list(APPEND declared "${name}")
  endforeach()
endforeach()
list(LENGTH declared n_declared)
if(n_declared EQUAL 0)
  list(APPEND failures "found no HURRAY_API declaration in ${HEADER_DIR}/*.h")
endif()
foreach(name IN LISTS declared)
  if(NOT name IN_LIST exported)
    list(APPEND failures "declared in a public header but not exported: ${name}")
  endif()
endforeach()

execute_process(COMMAND "${READELF}" -d "${LIB}"
  OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${LIB} failed (${rc})")
endif()
if(NOT dyn MATCHES "\\(SONAME\\)[^\n]*\\[(libhurray\\.so\\.[0-9.]+)\\]")
  list(APPEND failures "no SONAME libhurray.so.<version>")
else()
  set(soname "${CMAKE_MATCH_1}")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*\\[[^]\n]+\\]" needed_lines "${dyn}")
set(needed "")
foreach(line IN LISTS needed_lines)
  string(REGEX REPLACE "^.*\\[([^]]+)\\]$" "\\1" lib "${line}")
  list(APPEND needed "${lib}")
  if(lib MATCHES "^lib(cuda|cudart|nvrtc|nvidia|cublas|amdhip|hiprtc|hsa-runtime|rocm|python)")
    list(APPEND failures "links a device or Python runtime: NEEDED ${lib}")
  endif()
endforeach()

list(SORT exported)
string(REPLACE ";" " " exported_str "${exported}")
string(REPLACE ";" " " needed_str "${needed}")
message(STATUS "SONAME: ${soname}")
message(STATUS "NEEDED: ${needed_str}")
message(STATUS "exported (${n_exported}): ${exported_str}")
message(STATUS "declared with HURRAY_API: ${n_declared}")

if(failures)
  string(REPLACE ";" "\n  " msg "${failures}")
  message(FATAL_ERROR "libhurray export check failed:\n  ${msg}")
endif()
message(STATUS "export check passed")

# SPDX-License-Identifier: Apache-2.0
# Checks that struct hurray_api has one member per public function.
#
#   cmake -DHEADER_DIR=<include/hurray> -P check_api_table.cmake
#
# Every function the public headers declare with HURRAY_API, except the
# entry point hurray_get_api itself, must be a function-pointer member of
# hurray_api in hurray.h named without the "hurray_" prefix, and every
# member must name such a function. (src/api/function_table.cc static_asserts that its
# table fills exactly these members; c-ffi §8.)
cmake_minimum_required(VERSION 3.25)
if(NOT HEADER_DIR)
  message(FATAL_ERROR "check_api_table.cmake: HEADER_DIR is not set")
endif()

function(strip_comments var text)
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" text "${text}")
  string(REGEX REPLACE "//[^\n]*" "" text "${text}")
  set(${var} "${text}" PARENT_SCOPE)
endfunction()

set(failures "")

# Declared functions (the same pattern tests/packaging/check_exports.cmake uses).
file(GLOB headers "${HEADER_DIR}/*.h")
set(declared "")
foreach(header IN LISTS headers)
  file(READ "${header}" text)
  strip_comments(text "${text}")
  string(REGEX MATCHALL "HURRAY_API[^;{}#(]*[ *\n](hurray_[0-9a-z_]+)[ \n]*\\(" decls "${text}")
  foreach(decl IN LISTS decls)
    string(REGEX MATCH "hurray_[0-9a-z_]+[ \n]*\\($" name "${decl}")
    string(REGEX REPLACE "[ \n]*\\($" "" name "${name}")
    if(NOT name STREQUAL "hurray_get_api")
      list(APPEND declared "${name}")
    endif()
  endforeach()
endforeach()

# Members of struct hurray_api.
file(READ "${HEADER_DIR}/hurray.h" text)
strip_comments(text "${text}")
if(NOT text MATCHES "typedef struct hurray_api {([^}]*)} hurray_api;")
  message(FATAL_ERROR "no 'typedef struct hurray_api { ... } hurray_api;' in ${HEADER_DIR}/hurray.h")
endif()
set(body "${CMAKE_MATCH_1}")
string(REGEX MATCHALL "\\(\\*[ ]*[0-9a-z_]+[ ]*\\)[ \n]*\\(" ptrs "${body}")
set(members "")
foreach(p IN LISTS ptrs)
  string(REGEX REPLACE "^\\(\\*[ ]*([0-9a-z_]+).*$" "hurray_\\1" name "${p}")
  if(name IN_LIST members)
    list(APPEND failures "hurray_api lists ${name} twice")
  endif()
  list(APPEND members "${name}")
endforeach()

foreach(name IN LISTS declared)
  if(NOT name IN_LIST members)
    list(APPEND failures "declared with HURRAY_API but not in hurray_api: ${name}")
  endif()
endforeach()
foreach(name IN LISTS members)
  if(NOT name IN_LIST declared)
    list(APPEND failures "hurray_api member without a HURRAY_API function: ${name}")
  endif()
endforeach()

list(LENGTH declared n_declared)
list(LENGTH members n_members)
message(STATUS "declared with HURRAY_API (hurray_get_api excepted): ${n_declared}")
message(STATUS "hurray_api members: ${n_members}")
if(n_declared EQUAL 0 OR n_members EQUAL 0)
  list(APPEND failures "found no declarations or no members")
endif()
if(failures)
  string(REPLACE ";" "\n  " msg "${failures}")
  message(FATAL_ERROR "hurray_api table check failed:\n  ${msg}")
endif()
message(STATUS "hurray_api table check passed")

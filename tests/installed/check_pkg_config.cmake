# SPDX-License-Identifier: Apache-2.0
# hurray.pc of an install names the prefix it was installed into, as a
# normalised path: pkg-config's libdir and includedir are exactly
# PREFIX/LIBDIR and PREFIX/include, with no `..`.
#   cmake -DPKG_CONFIG=... -DPREFIX=... -DLIBDIR=lib -P check_pkg_config.cmake
# With -DBUILD_DIR=<a build tree> -DWORK_DIR=<dir> it first installs that
# tree's Development component with a RELATIVE, unnormalised prefix
# (`p/./x/..`) from WORK_DIR, and checks that install (PREFIX=WORK_DIR/p).
cmake_minimum_required(VERSION 3.25)
if(BUILD_DIR)
  file(REMOVE_RECURSE "${WORK_DIR}")
  file(MAKE_DIRECTORY "${WORK_DIR}")
  execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "p/./x/.."
      --component Development
    WORKING_DIRECTORY "${WORK_DIR}" RESULT_VARIABLE rc OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix p/./x/.. failed (${rc})")
  endif()
  set(PREFIX "${WORK_DIR}/p")
endif()
set(ENV{PKG_CONFIG_LIBDIR} "${PREFIX}/${LIBDIR}/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "${PREFIX}/${LIBDIR}/pkgconfig")
foreach(var libdir includedir)
  execute_process(COMMAND "${PKG_CONFIG}" --variable=${var} hurray
    OUTPUT_VARIABLE got OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(var STREQUAL "libdir")
    set(want "${PREFIX}/${LIBDIR}")
  else()
    set(want "${PREFIX}/include")
  endif()
  message(STATUS "${var}: ${got}")
  if(NOT rc EQUAL 0 OR NOT got STREQUAL want)
    message(FATAL_ERROR "pkg-config --variable=${var} hurray is '${got}' (exit ${rc}), want '${want}'")
  endif()
endforeach()

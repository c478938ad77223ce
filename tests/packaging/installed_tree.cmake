# SPDX-License-Identifier: Apache-2.0
# The installed tree as a consumer sees it. Run by CTest in three steps:
#   STEP=install       cmake --install the Runtime and Development components
#                      into WORK_DIR/prefix and check the files that appear;
#   STEP=find_package  configure, build and run consumer/ against that prefix
#                      with find_package(hurray CONFIG REQUIRED);
#   STEP=pkg_config    compile and run consumer/consumer.c with the flags
#                      `pkg-config --cflags --libs hurray` gives.
# Compilers and flags are the ones of the build under test, so sanitizer
# builds produce sanitizer consumers, and cross builds consumers for the
# target, run through EMULATOR (CMAKE_CROSSCOMPILING_EMULATOR; empty in a
# native build).
cmake_minimum_required(VERSION 3.25)

set(prefix "${WORK_DIR}/prefix")
set(libdir "${prefix}/${LIBDIR}")

include("${CMAKE_CURRENT_LIST_DIR}/run_checked.cmake")

if(STEP STREQUAL "install")
  file(REMOVE_RECURSE "${WORK_DIR}")
  foreach(component Runtime Development)
    set(cfg "")
    if(CONFIG)
      set(cfg --config "${CONFIG}")
    endif()
    run_checked("cmake --install (${component})"
      "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" ${cfg}
      --component ${component})
  endforeach()

  string(REGEX MATCH "^[0-9]+\\.[0-9]+" major_minor "${VERSION}")
  set(missing "")
  foreach(f
      "${INCLUDEDIR}/hurray/hurray.h"
      "${INCLUDEDIR}/hurray/hurray.hpp"
      "${INCLUDEDIR}/hurray/dlpack.h"
      "${INCLUDEDIR}/hurray/version.h"
      "${LIBDIR}/libhurray.so.${VERSION}"
      "${LIBDIR}/cmake/hurray/hurrayConfig.cmake"
      "${LIBDIR}/cmake/hurray/hurrayConfigVersion.cmake"
      "${LIBDIR}/cmake/hurray/hurrayTargets.cmake"
      "${LIBDIR}/pkgconfig/hurray.pc")
    if(NOT EXISTS "${prefix}/${f}" OR IS_SYMLINK "${prefix}/${f}")
      list(APPEND missing "${f} (a regular file)")
    endif()
  endforeach()
  # The SONAME link and the development link.
  foreach(link "libhurray.so.${major_minor}" "libhurray.so")
    if(NOT IS_SYMLINK "${libdir}/${link}")
      list(APPEND missing "${LIBDIR}/${link} (a symbolic link)")
    endif()
  endforeach()
  # Private headers (src/) stay private: every installed header is one of
  # include/hurray/*, hurray/dlpack.h among them (hurray.h includes it).
  file(GLOB_RECURSE installed_headers RELATIVE "${prefix}" "${prefix}/*.h" "${prefix}/*.hpp")
  foreach(h IN LISTS installed_headers)
    if(NOT h MATCHES "^${INCLUDEDIR}/hurray/[^/]+$")
      list(APPEND missing "nothing but include/hurray/*: found ${h}")
    endif()
  endforeach()
  if(missing)
    string(REPLACE ";" "\n  " msg "${missing}")
    message(FATAL_ERROR "installed tree under ${prefix} is wrong:\n  ${msg}")
  endif()
  file(GLOB_RECURSE all RELATIVE "${prefix}" LIST_DIRECTORIES false "${prefix}/*")
  list(SORT all)
  string(REPLACE ";" "\n  " all "${all}")
  message(STATUS "installed:\n  ${all}")

elseif(STEP STREQUAL "find_package")
  set(build "${WORK_DIR}/consumer-build")
  file(REMOVE_RECURSE "${build}")
  set(gen_args -G "${GENERATOR}")
  if(MAKE_PROGRAM)
    list(APPEND gen_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
  endif()
  if(CONFIG)
    list(APPEND gen_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
  endif()
  run_checked("configuring the consumer"
    "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${build}" ${gen_args}
      "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
      "-DCMAKE_C_FLAGS=${C_FLAGS}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
      "-DCMAKE_PREFIX_PATH=${prefix}"
      "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"
      "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF"
      "-DHURRAY_EXPECTED_PREFIX=${prefix}"
      "-DHURRAY_EXPECTED_VERSION=${VERSION}")
  set(cfg "")
  if(CONFIG)
    set(cfg --config "${CONFIG}")
  endif()
  run_checked("building the consumer" "${CMAKE_COMMAND}" --build "${build}" ${cfg})
  foreach(exe hurray_consumer_c hurray_consumer_cxx)
    file(GLOB_RECURSE found "${build}/${exe}" "${build}/*/${exe}")
    if(NOT found)
      message(FATAL_ERROR "consumer program ${exe} was not built")
    endif()
    list(GET found 0 found)
    run_checked("running ${exe}" ${EMULATOR} "${found}")
  endforeach()

elseif(STEP STREQUAL "pkg_config")
  if(NOT PKG_CONFIG)
    message(STATUS "HURRAY_SKIP: pkg-config not found")
    return()
  endif()
  # PKG_CONFIG_LIBDIR replaces the default search path: only this prefix's
  # hurray.pc can be found, never one installed on the machine.
  set(ENV{PKG_CONFIG_LIBDIR} "${libdir}/pkgconfig")
  set(ENV{PKG_CONFIG_PATH} "${libdir}/pkgconfig")
  execute_process(COMMAND "${PKG_CONFIG}" --modversion hurray
    OUTPUT_VARIABLE modversion OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT modversion STREQUAL VERSION)
    message(FATAL_ERROR "pkg-config --modversion hurray gave '${modversion}' (${rc}), want ${VERSION}")
  endif()
  execute_process(COMMAND "${PKG_CONFIG}" --cflags --libs hurray
    OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  execute_process(COMMAND "${PKG_CONFIG}" --variable=libdir hurray
    OUTPUT_VARIABLE pc_libdir OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs hurray failed (${rc})")
  endif()
  message(STATUS "pkg-config --cflags --libs hurray: ${flags}")
  get_filename_component(pc_libdir "${pc_libdir}" REALPATH)
  get_filename_component(real_libdir "${libdir}" REALPATH)
  if(NOT pc_libdir STREQUAL real_libdir)
    message(FATAL_ERROR "hurray.pc libdir is ${pc_libdir}, want ${real_libdir}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  separate_arguments(c_flags UNIX_COMMAND "${C_FLAGS}")
  set(exe "${WORK_DIR}/pkg_config_consumer")
  file(REMOVE "${exe}")
  run_checked("compiling with pkg-config flags"
    "${C_COMPILER}" ${c_flags} -std=c11 -Wall -Wextra -Wpedantic -Werror
      "${CONSUMER_DIR}/consumer.c" ${flags} "-Wl,-rpath,${pc_libdir}" -o "${exe}")
  run_checked("running the pkg-config consumer" ${EMULATOR} "${exe}")

else()
  message(FATAL_ERROR "installed_tree.cmake: unknown STEP '${STEP}'")
endif()

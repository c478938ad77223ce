# SPDX-License-Identifier: Apache-2.0
# The README's example programs, built and run the way the README tells a
# user to, against the prefix that packaging.install filled. The program and
# its CMakeLists.txt are cut out of README.md at test time, so the README and
# this test cannot drift apart. Run by CTest as
#   cmake -DREADME=... -DLANG=c|cpp -DSTEP=find_package|pkg_config
#         -DPREFIX=... -DLIBDIR=... -DWORK_DIR=... (compilers, flags, generator)
#         -P readme_examples.cmake
# or, for the C program built with libhurray's checkout in the project
# (add_subdirectory, the ```cmake block naming it; no install involved),
#   cmake -DREADME=... -DLANG=c -DSTEP=add_subdirectory -DSOURCE_DIR=<checkout>
#         -DWORK_DIR=... (compilers, generator) -P readme_examples.cmake
#
# A README block is a fenced block whose info string is the language:
#   ```c      the C program (exactly one such block)
#   ```cpp    the C++ program (exactly one)
#   ```cmake  a CMakeLists.txt; the one naming app.c / app.cpp belongs to it
#   ```text   what both programs print (exactly one), compared line for line
# Compilers and flags are those of the build under test (sanitizer builds
# build sanitized examples; cross builds build them for the target and run
# them through -DEMULATOR=<runner;args>, CMAKE_CROSSCOMPILING_EMULATOR); -Wall -Wextra -Werror come from the README's own
# CMakeLists.txt and pkg-config command line.
cmake_minimum_required(VERSION 3.25)

# Sets ${out} to the body of the one ```<lang> block of README.md whose text
# contains `needle` (and, given a fourth argument, does not contain that);
# fails unless there is exactly one.
function(readme_block out lang needle)
  set(exclude "${ARGV3}")
  file(READ "${README}" text)
  set(fence "\n```${lang}\n")
  string(LENGTH "${fence}" fence_len)
  set(found "")
  set(count 0)
  while(TRUE)
    string(FIND "${text}" "${fence}" at)
    if(at EQUAL -1)
      break()
    endif()
    math(EXPR body_at "${at} + ${fence_len}")
    string(SUBSTRING "${text}" ${body_at} -1 text)
    string(FIND "${text}" "\n```" end)
    if(end EQUAL -1)
      message(FATAL_ERROR "README.md: a ```${lang} block is never closed")
    endif()
    math(EXPR end "${end} + 1")  # keep the block's last newline
    string(SUBSTRING "${text}" 0 ${end} body)
    string(SUBSTRING "${text}" ${end} -1 text)
    string(FIND "${body}" "${needle}" has)
    set(excluded -1)
    if(NOT exclude STREQUAL "")
      string(FIND "${body}" "${exclude}" excluded)
    endif()
    if(NOT has EQUAL -1 AND excluded EQUAL -1)
      set(found "${body}")
      math(EXPR count "${count} + 1")
    endif()
  endwhile()
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "README.md has ${count} ```${lang} blocks containing '${needle}', want exactly 1")
  endif()
  set(${out} "${found}" PARENT_SCOPE)
endfunction()

include("${CMAKE_CURRENT_LIST_DIR}/run_checked.cmake")

# Runs the example and compares what it prints with the README's ```text block.
function(run_example exe needle)
  readme_block(want text "${needle}")
  execute_process(COMMAND ${EMULATOR} "${exe}" RESULT_VARIABLE rc OUTPUT_VARIABLE got ERROR_VARIABLE err)
  message("${exe} printed:\n${got}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${exe} exited with ${rc}")
  endif()
  if(NOT got STREQUAL want)
    message(FATAL_ERROR "${exe} printed\n${got}\nbut README.md says it prints\n${want}")
  endif()
endfunction()

# The C program is the ```c block with free_matrix, the cross-process one the
# ```c block calling hurray_ipc_send, the tensor group's the ```c block with
# hurray_ipc_send_set; each has its own ```text block of output.
if(LANG STREQUAL "c")
  set(src app.c)
  set(exe app)
  set(block_lang c)
  set(program_needle "free_matrix")
  set(output_needle "freed")
elseif(LANG STREQUAL "c_ipc")
  set(src ipc.c)
  set(exe app_ipc)
  set(block_lang c)
  set(program_needle "hurray_ipc_send(")
  set(output_needle "references returned")
elseif(LANG STREQUAL "c_group")
  set(src group.c)
  set(exe app_group)
  set(block_lang c)
  set(program_needle "hurray_ipc_send_set")
  set(output_needle "allocations returned")
elseif(LANG STREQUAL "cpp")
  set(src app.cpp)
  set(exe app_cpp)
  set(block_lang cpp)
  set(program_needle "int main")
  set(output_needle "freed")
else()
  message(FATAL_ERROR "readme_examples.cmake: unknown LANG '${LANG}'")
endif()
if(NOT STEP STREQUAL "add_subdirectory" AND NOT EXISTS "${PREFIX}/${LIBDIR}/libhurray.so")
  message(FATAL_ERROR "no libhurray.so under ${PREFIX}/${LIBDIR}: packaging.install must run first")
endif()

set(dir "${WORK_DIR}/readme_${LANG}_${STEP}")
file(REMOVE_RECURSE "${dir}")
readme_block(program ${block_lang} "${program_needle}")
file(WRITE "${dir}/${src}" "${program}")

if(STEP STREQUAL "find_package")
  # As in the README: cmake -S . -B build -DCMAKE_PREFIX_PATH=<prefix>.
  if(LANG STREQUAL "c_ipc" OR LANG STREQUAL "c_group")
    # Built "like app.c": the C program's CMakeLists.txt, renamed.
    readme_block(lists cmake "add_executable(app app.c)" "add_subdirectory(")
    string(REGEX REPLACE "\\(app([ )])" "(${exe}\\1" lists "${lists}")
    string(REPLACE "app.c" "${src}" lists "${lists}")
  else()
    readme_block(lists cmake "add_executable(${exe} ${src})" "add_subdirectory(")
  endif()
  file(WRITE "${dir}/CMakeLists.txt" "${lists}")
  set(gen_args -G "${GENERATOR}")
  if(MAKE_PROGRAM)
    list(APPEND gen_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
  endif()
  run_checked("configuring the README's CMakeLists.txt"
    "${CMAKE_COMMAND}" -S "${dir}" -B "${dir}/build" ${gen_args}
      "-DCMAKE_PREFIX_PATH=${PREFIX}"
      "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
      "-DCMAKE_C_FLAGS=${C_FLAGS}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
      "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"
      "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF")
  # The package must be the one under test, not one installed elsewhere.
  file(STRINGS "${dir}/build/CMakeCache.txt" found_dir REGEX "^hurray_DIR:")
  string(REGEX REPLACE "^hurray_DIR:[A-Z]+=" "" found_dir "${found_dir}")
  file(REAL_PATH "${found_dir}" found_dir)
  file(REAL_PATH "${PREFIX}" want_prefix)
  string(FIND "${found_dir}/" "${want_prefix}/" pos)
  if(NOT pos EQUAL 0)
    message(FATAL_ERROR "the README's CMakeLists.txt found hurray in '${found_dir}', not under ${want_prefix}")
  endif()
  run_checked("building the README's ${src}" "${CMAKE_COMMAND}" --build "${dir}/build")
  # Runs without LD_LIBRARY_PATH: CMake's build RPATH names the prefix.
  run_example("${dir}/build/${exe}" "${output_needle}")

elseif(STEP STREQUAL "add_subdirectory")
  # As in the README: the checkout in libhurray/ beside app.c (a link to
  # SOURCE_DIR here), then cmake -S . -B build and cmake --build build.
  if(NOT LANG STREQUAL "c")
    message(FATAL_ERROR "readme_examples.cmake: STEP add_subdirectory is for LANG c only")
  endif()
  readme_block(lists cmake "add_subdirectory(")
  file(WRITE "${dir}/CMakeLists.txt" "${lists}")
  file(CREATE_LINK "${SOURCE_DIR}" "${dir}/libhurray" SYMBOLIC)
  set(gen_args -G "${GENERATOR}")
  if(MAKE_PROGRAM)
    list(APPEND gen_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
  endif()
  run_checked("configuring the README's add_subdirectory CMakeLists.txt"
    "${CMAKE_COMMAND}" -S "${dir}" -B "${dir}/build" ${gen_args}
      "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
  # libhurray is built inside the project, from the checkout, not found installed.
  file(STRINGS "${dir}/build/CMakeCache.txt" found_dir REGEX "^hurray_DIR:")
  if(found_dir)
    message(FATAL_ERROR "the add_subdirectory project looked for an installed hurray: ${found_dir}")
  endif()
  run_checked("building the README's app.c with libhurray's checkout" "${CMAKE_COMMAND}" --build "${dir}/build")
  if(NOT EXISTS "${dir}/build/libhurray/libhurray.so")
    message(FATAL_ERROR "no libhurray.so built in ${dir}/build/libhurray")
  endif()
  run_example("${dir}/build/${exe}" "${output_needle}")

elseif(STEP STREQUAL "pkg_config")
  if(NOT PKG_CONFIG)
    message(STATUS "HURRAY_SKIP: pkg-config not found")
    return()
  endif()
  # As in the README: PKG_CONFIG_PATH=<prefix>/lib/pkgconfig, then
  #   cc  -Wall -Wextra -Werror app.c ...   /   c++ -std=c++17 ... app.cpp ...
  #   $(pkg-config --cflags --libs hurray) -Wl,-rpath,$(pkg-config --variable=libdir hurray)
  # PKG_CONFIG_LIBDIR keeps any hurray.pc on the machine out of the search.
  set(ENV{PKG_CONFIG_LIBDIR} "${PREFIX}/${LIBDIR}/pkgconfig")
  set(ENV{PKG_CONFIG_PATH} "${PREFIX}/${LIBDIR}/pkgconfig")
  execute_process(COMMAND "${PKG_CONFIG}" --cflags --libs hurray
    OUTPUT_VARIABLE flags OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config --cflags --libs hurray failed (${rc})")
  endif()
  execute_process(COMMAND "${PKG_CONFIG}" --variable=libdir hurray
    OUTPUT_VARIABLE pc_libdir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR pc_libdir STREQUAL "")
    message(FATAL_ERROR "pkg-config --variable=libdir hurray failed (${rc})")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  if(block_lang STREQUAL "c")
    separate_arguments(lang_flags UNIX_COMMAND "${C_FLAGS}")
    set(compiler "${C_COMPILER}")
  else()
    separate_arguments(lang_flags UNIX_COMMAND "${CXX_FLAGS}")
    set(compiler "${CXX_COMPILER}" -std=c++17)
  endif()
  run_checked("compiling the README's ${src} with pkg-config"
    ${compiler} ${lang_flags} -Wall -Wextra -Werror "${dir}/${src}" ${flags}
      "-Wl,-rpath,${pc_libdir}" -o "${dir}/${exe}")
  run_example("${dir}/${exe}" "${output_needle}")

else()
  message(FATAL_ERROR "readme_examples.cmake: unknown STEP '${STEP}'")
endif()

# SPDX-License-Identifier: Apache-2.0
# Run by `cmake --install` (install(CODE) in CMakeLists.txt): writes hurray.pc
# with the prefix being installed into, normalised (no `..`, `.` or trailing
# slash, absolute), into $DESTDIR<prefix>/HURRAY_PC_DIR. HURRAY_PC_TEMPLATE is the
# configured hurray.pc.in with @HURRAY_PC_INSTALL_PREFIX@ still open.
# A relative --prefix installs below the working directory, which is what
# CMAKE_CURRENT_SOURCE_DIR is while an install script runs.
cmake_path(SET _hurray_prefix NORMALIZE "${CMAKE_INSTALL_PREFIX}")
cmake_path(ABSOLUTE_PATH _hurray_prefix BASE_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}" NORMALIZE)
string(REGEX REPLACE "(.)/+$" "\\1" _hurray_prefix "${_hurray_prefix}")
if(IS_ABSOLUTE "${HURRAY_PC_DIR}")
  set(_hurray_pc_dir "${HURRAY_PC_DIR}")
else()
  set(_hurray_pc_dir "${_hurray_prefix}/${HURRAY_PC_DIR}")
endif()
file(READ "${HURRAY_PC_TEMPLATE}" _hurray_pc)
string(REPLACE "@HURRAY_PC_INSTALL_PREFIX@" "${_hurray_prefix}" _hurray_pc "${_hurray_pc}")
set(_hurray_pc_file "$ENV{DESTDIR}${_hurray_pc_dir}/hurray.pc")
message(STATUS "Installing: ${_hurray_pc_file}")
file(WRITE "${_hurray_pc_file}" "${_hurray_pc}")
list(APPEND CMAKE_INSTALL_MANIFEST_FILES "${_hurray_pc_file}")

# SPDX-License-Identifier: Apache-2.0
# Checks that no file in src/ includes a file above it in the layering that
# src/README.md lays down. From the bottom:
#
#   0 common    errors, diagnostics, the block cache
#   1 handle    the handle rules and representations
#   2 checking  the checking mode (HURRAY_CHECK)
#   3 copy      copy plans and the host gather
#   4 device    one backend table per device type
#   5 api       the entry points of hurray.h
#   6 ipc       across processes
#
# A file may include its own layer and those below. A vendor's folder
# (src/device/<vendor>/) is included from that folder only. Every file of
# src/ must sit in one of the layers' folders; only src/README.md may stand
# at the top. Every file is read, whatever its extension (.cc, .h, .inc,
# .cc.in...). An include is resolved as the compiler resolves it: "..." next
# to the file, then from src/ (the library's -I); <...> from src/. Includes
# that name no file of src/ (hurray/*.h, system headers) are not looked at. Include cycles between files are refused
# too, within a layer as across layers.
#
#   cmake -DSRC_DIR=<src> -P layers.cmake
#   cmake -DSELF_TEST=<scratch dir> -P layers.cmake   (the check finds each
#                                                      kind of planted violation)
cmake_minimum_required(VERSION 3.25)

set(HURRAY_LAYERS common handle checking copy device api ipc)

# Sets ${out} to the layer number of `rel` (a path under src/), or -1 for a
# file outside every layer.
function(layer_of rel out)
  set(n -1)
  if(rel MATCHES "^([^/]+)/")
    list(FIND HURRAY_LAYERS "${CMAKE_MATCH_1}" n)
  endif()
  set(${out} ${n} PARENT_SCOPE)
endfunction()

# Sets ${out} to the list of violations found under `src`.
function(check_tree src out)
  set(bad "")
  file(GLOB_RECURSE files RELATIVE "${src}" "${src}/*")
  set(edges "")
  foreach(rel IN LISTS files)
    layer_of("${rel}" from_layer)
    if(from_layer EQUAL -1)
      if(NOT rel STREQUAL "README.md")
        list(APPEND bad "${rel} is in no layer's folder (src/README.md)")
      endif()
      continue()
    endif()
    get_filename_component(dir "${rel}" DIRECTORY)
    file(STRINGS "${src}/${rel}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]+)[\">].*" "\\1" inc "${line}")
      set(target "")
      get_filename_component(candidate "${src}/${dir}/${inc}" ABSOLUTE)
      if(line MATCHES "include[ \t]*\"" AND EXISTS "${candidate}")
        set(target "${candidate}")
      elseif(EXISTS "${src}/${inc}")
        get_filename_component(target "${src}/${inc}" ABSOLUTE)
      endif()
      if(target STREQUAL "")
        continue()
      endif()
      file(RELATIVE_PATH to "${src}" "${target}")
      if(to MATCHES "^\\.\\./")
        continue()  # outside src/ (include/hurray)
      endif()
      list(APPEND edges "${rel}>${to}")
      layer_of("${to}" to_layer)
      if(to_layer GREATER from_layer)
        list(GET HURRAY_LAYERS ${from_layer} from_name)
        list(GET HURRAY_LAYERS ${to_layer} to_name)
        list(APPEND bad "${rel} (${from_name}, ${from_layer}) includes ${to} (${to_name}, ${to_layer})")
      endif()
      if(to MATCHES "^device/([^/]+)/")
        set(vendor_dir "device/${CMAKE_MATCH_1}/")
        string(FIND "${rel}" "${vendor_dir}" at)
        if(NOT at EQUAL 0)
          list(APPEND bad "${rel} includes ${to} from outside that vendor's folder")
        endif()
      endif()
    endforeach()
  endforeach()

  # Include cycles: a depth-first walk from every file over the edges found.
  foreach(start IN LISTS files)
    set(stack "${start}")
    set(seen "")
    while(stack)
      list(POP_BACK stack node)
      foreach(edge IN LISTS edges)
        if(edge MATCHES "^(.+)>(.+)$" AND CMAKE_MATCH_1 STREQUAL node)
          set(next "${CMAKE_MATCH_2}")
          if(next STREQUAL start)
            list(APPEND bad "${start} is in an include cycle (through ${node})")
            set(stack "")
            break()
          endif()
          list(FIND seen "${next}" at)
          if(at EQUAL -1)
            list(APPEND seen "${next}")
            list(APPEND stack "${next}")
          endif()
        endif()
      endforeach()
    endwhile()
  endforeach()
  set(${out} "${bad}" PARENT_SCOPE)
endfunction()

if(SELF_TEST)
  set(t "${SELF_TEST}/src")
  file(REMOVE_RECURSE "${SELF_TEST}")
  file(WRITE "${t}/README.md" "the layers\n")
  file(WRITE "${t}/common/error.h" "// base\n")
  file(WRITE "${t}/handle/layout.h" "#include \"common/error.h\"\n")
  file(WRITE "${t}/copy/plan.h" "#include \"../common/error.h\"\n")
  file(WRITE "${t}/api/alloc.h" "#include \"device/backend.h\"\n")
  # 1: device (4) includes api (5).
  file(WRITE "${t}/device/backend.h" "#include \"copy/plan.h\"\n#include \"api/alloc.h\"\n")
  file(WRITE "${t}/device/cuda/vendor.h" "#include \"device/backend.h\"\n")
  # 2: one vendor's folder includes another's.
  file(WRITE "${t}/device/hip/hip.cc" "#include \"../cuda/vendor.h\"\n#include <cuda.h>\n")
  # 3: common (0) includes handle (1), written relative to the file.
  file(WRITE "${t}/common/diagnostics.h" "#include \"../handle/layout.h\"\n")
  # 4: handle (1) includes checking (2).
  file(WRITE "${t}/handle/handle.cc" "#include \"checking/checking.h\"\n")
  file(WRITE "${t}/checking/checking.h" "#include \"handle/layout.h\"\n")
  # 5: a file outside every layer.
  file(WRITE "${t}/loose.cc" "#include \"common/error.h\"\n")
  # 6, 7: a cycle of two files within one layer (each found from both ends).
  file(WRITE "${t}/ipc/a.h" "#include \"ipc/b.h\"\n")
  file(WRITE "${t}/ipc/b.h" "#include \"ipc/a.h\"\n")
  # The lowest layer including the highest also makes api/alloc.h ->
  # device/backend.h -> api/alloc.h a cycle (8, 9).
  # 10: an upward include in angle brackets (src/ is on the include path).
  file(WRITE "${t}/copy/host.cc" "#include <api/alloc.h>\n#include <vector>\n")
  # 11: an upward include from a file with another extension, included by a
  # file of the layer.
  file(WRITE "${t}/common/tables.inc" "#include \"checking/checking.h\"\n")
  file(WRITE "${t}/common/error.cc" "#include \"common/tables.inc\"\n")
  check_tree("${t}" bad)
  list(LENGTH bad n)
  if(NOT n EQUAL 11)
    list(JOIN bad "\n  " text)
    message(FATAL_ERROR "layers self-test: expected 11 violations, found ${n}:\n  ${text}")
  endif()
  message(STATUS "layers self-test: the 11 planted violations were found")
  return()
endif()

if(NOT SRC_DIR)
  message(FATAL_ERROR "layers.cmake: SRC_DIR is not set")
endif()
check_tree("${SRC_DIR}" bad)
if(bad)
  list(JOIN bad "\n  " text)
  message(FATAL_ERROR "the layering of src/ (src/README.md) is broken:\n  ${text}")
endif()
list(JOIN HURRAY_LAYERS " < " order)
message(STATUS "layers: every file of ${SRC_DIR} is in a layer (${order}); none includes one above it; no include cycles")

# SPDX-License-Identifier: Apache-2.0
# run_checked(WHAT COMMAND...): runs COMMAND, echoes its output, and stops
# the script with WHAT and the command line when it exits non-zero. Included
# by the packaging scripts run with `cmake -P`.
function(run_checked what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(out)
    message("${out}")
  endif()
  if(err)
    message("${err}")
  endif()
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "${what} failed (${rc}): ${cmd}")
  endif()
endfunction()

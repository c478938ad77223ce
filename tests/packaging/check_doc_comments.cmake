# SPDX-License-Identifier: Apache-2.0
# Checks that every function a header declares with HURRAY_API has a doc
# comment directly above it, of its own, with the labelled parts of
# include/hurray/hurray.h's convention, in this order:
#
#   Parameters:   "Parameters: none" for a (void) function; otherwise every
#                 parameter on a line of its own as "*   name  [in] ...",
#                 "[out]", "[in, out]", "[in, consumed on success]", ...
#   Returns:
#   Cost:         optional; names no status (no HURRAY_OK, no HURRAY_ERR_*)
#   On failure:   "cannot fail" when Returns names no error
#   Threads:
#   Spec:         followed by a docs/ path
#
# and that a function returning int32_t follows the header's HURRAY_NODISCARD
# rule: HURRAY_NODISCARD when its Returns names an error (HURRAY_ERR_*, or
# "the errors of" another function), except hurray_buffer_release; none, and
# "Returns: HURRAY_OK, always", when it names none.
#
#   cmake -DHEADER=<header.h> -P check_doc_comments.cmake
#
# Fails (FATAL_ERROR) naming each function and what its comment lacks.
cmake_minimum_required(VERSION 3.25)
if(NOT HEADER)
  message(FATAL_ERROR "check_doc_comments.cmake: HEADER is not set")
endif()
file(READ "${HEADER}" text)

# Failures are kept in a string, one per line: the header text is full of
# semicolons, so no CMake list ever holds any of it.
set(failures "")
set(n_checked 0)

# A declaration: HURRAY_API, then return type and qualifiers, the name, "(".
set(decl_re "HURRAY_API[^;{}#(]*[ *\n](hurray_[0-9a-z_]+)[ \t\n]*\\(")
set(labels "Parameters:" "Returns:" "On failure:" "Threads:" "Spec:")
string(REPLACE ";" ", " order "${labels}")

# Checks the declarations in `code` (text between two comments) against
# `comment`, the comment right before that text.
function(check_chunk code comment)
  string(REGEX MATCHALL "${decl_re}" decls "${code}")
  list(LENGTH decls n)
  if(n EQUAL 0)
    return()
  endif()
  math(EXPR total "${n_checked} + ${n}")
  set(n_checked ${total} PARENT_SCOPE)
  string(REGEX MATCH "${decl_re}([^)]*)\\)" m "${code}")
  set(name "${CMAKE_MATCH_1}")
  set(params "${CMAKE_MATCH_2}")
  set(bad "")
  if(n GREATER 1)
    string(REGEX REPLACE "${decl_re}" "\\1" names "${decls}")
    string(REPLACE ";" ", " names "${names}")
    string(APPEND bad "\n  ${name}: one comment for ${n} declarations (${names}); give each its own")
  endif()
  if(NOT code MATCHES "^[ \t\r\n]*HURRAY_API")
    string(APPEND bad "\n  ${name}: no doc comment directly above the declaration")
    set(failures "${failures}${bad}" PARENT_SCOPE)
    return()
  endif()
  # Each label at the start of a comment line, in order.
  set(last -1)
  foreach(label IN LISTS labels)
    string(REGEX MATCH "\n[ \t]*\\*[ \t]*${label}" hit "${comment}")
    if(hit STREQUAL "")
      string(APPEND bad "\n  ${name}: no '${label}' line")
      continue()
    endif()
    string(FIND "${comment}" "${hit}" pos)
    if(pos LESS last)
      string(APPEND bad "\n  ${name}: '${label}' is out of order (${order})")
    endif()
    set(last ${pos})
  endforeach()
  # Cost: optional, between Returns and On failure, and no status in it.
  set(part_re "\n[ \t]*\\*[ \t]*")
  string(REGEX MATCH "${part_re}Cost:" cost_hit "${comment}")
  if(NOT cost_hit STREQUAL "")
    string(FIND "${comment}" "${cost_hit}" cost_pos)
    string(REGEX MATCH "${part_re}Returns:" r_hit "${comment}")
    string(REGEX MATCH "${part_re}On failure:" f_hit "${comment}")
    string(FIND "${comment}" "${r_hit}" r_pos)
    string(FIND "${comment}" "${f_hit}" f_pos)
    if(r_hit STREQUAL "" OR f_hit STREQUAL "" OR cost_pos LESS r_pos OR cost_pos GREATER f_pos)
      string(APPEND bad "\n  ${name}: 'Cost:' is out of order (after Returns:, before On failure:)")
    else()
      math(EXPR cost_len "${f_pos} - ${cost_pos}")
      string(SUBSTRING "${comment}" ${cost_pos} ${cost_len} cost_text)
      if(cost_text MATCHES "HURRAY_(OK|ERR_)")
        string(APPEND bad "\n  ${name}: 'Cost:' lists a status (statuses go under Returns:)")
      endif()
    endif()
  endif()
  # The HURRAY_NODISCARD rule, for the functions that return a status.
  string(REGEX MATCH "HURRAY_API([^(]*)${name}" rt "${code}")
  set(ret_type "${CMAKE_MATCH_1}")
  string(REGEX MATCH "${part_re}Returns:.*${part_re}On failure:" returns_text "${comment}")
  string(REGEX MATCH "${part_re}On failure:[^\n]*" fail_line "${comment}")
  if(ret_type MATCHES "(^|[^u])int32_t" AND NOT returns_text STREQUAL "")
    if(returns_text MATCHES "HURRAY_ERR_|errors? of ")
      if(NOT ret_type MATCHES "HURRAY_NODISCARD" AND NOT name STREQUAL "hurray_buffer_release")
        string(APPEND bad "\n  ${name}: can fail but is not HURRAY_NODISCARD")
      endif()
    else()
      if(ret_type MATCHES "HURRAY_NODISCARD")
        string(APPEND bad "\n  ${name}: always succeeds but is HURRAY_NODISCARD")
      endif()
      if(NOT returns_text MATCHES "HURRAY_OK, always")
        string(APPEND bad "\n  ${name}: names no error but does not say 'Returns: HURRAY_OK, always'")
      endif()
      if(NOT fail_line MATCHES "cannot fail")
        string(APPEND bad "\n  ${name}: names no error but 'On failure:' does not say 'cannot fail'")
      endif()
    endif()
  endif()
  if(comment MATCHES "\n[ \t]*\\*[ \t]*Spec:" AND
     NOT comment MATCHES "\n[ \t]*\\*[ \t]*Spec:[ \t]+docs/")
    string(APPEND bad "\n  ${name}: 'Spec:' names no docs/ section")
  endif()
  # Parameters: "none" for (void), else each parameter name documented.
  string(STRIP "${params}" params)
  if(params STREQUAL "void" OR params STREQUAL "")
    if(NOT comment MATCHES "\n[ \t]*\\*[ \t]*Parameters:[ \t]*none")
      string(APPEND bad "\n  ${name}: takes no parameters but lacks 'Parameters: none'")
    endif()
  elseif(NOT params MATCHES "\\(")  # function-pointer parameters: names not checked
    string(REPLACE "," ";" plist "${params}")
    foreach(p IN LISTS plist)
      string(STRIP "${p}" p)
      if(NOT p MATCHES "([A-Za-z_][A-Za-z0-9_]*)$")
        continue()
      endif()
      set(pname "${CMAKE_MATCH_1}")
      if(NOT comment MATCHES "\n[ \t]*\\*[ \t]+${pname}[ \t]+\\[")
        string(APPEND bad
          "\n  ${name}: parameter '${pname}' is not listed under Parameters: as '${pname}  [in|out|...]'")
      endif()
    endforeach()
  endif()
  set(failures "${failures}${bad}" PARENT_SCOPE)
endfunction()

# Walk the text: code, comment, code, comment, ... Each code chunk is checked
# against the comment that precedes it.
set(rest "${text}")
set(comment "")
while(TRUE)
  string(FIND "${rest}" "/*" open)
  if(open EQUAL -1)
    check_chunk("${rest}" "${comment}")
    break()
  endif()
  string(SUBSTRING "${rest}" 0 ${open} code)
  check_chunk("${code}" "${comment}")
  math(EXPR start "${open} + 2")
  string(SUBSTRING "${rest}" ${start} -1 rest)
  string(FIND "${rest}" "*/" close)
  if(close EQUAL -1)
    message(FATAL_ERROR "${HEADER}: unterminated comment")
  endif()
  # Keep the "\n" before the first line so that every line starts alike.
  string(SUBSTRING "${rest}" 0 ${close} comment)
  set(comment "\n *${comment}")
  math(EXPR start "${close} + 2")
  string(SUBSTRING "${rest}" ${start} -1 rest)
endwhile()

if(n_checked EQUAL 0)
  string(APPEND failures "\n  found no HURRAY_API declaration in ${HEADER}")
endif()
if(NOT failures STREQUAL "")
  message(FATAL_ERROR "doc comment check failed for ${HEADER}:${failures}")
endif()
message(STATUS "doc comment check passed: ${n_checked} functions in ${HEADER}")

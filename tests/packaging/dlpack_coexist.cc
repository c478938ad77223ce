// SPDX-License-Identifier: Apache-2.0
// The same checks as dlpack_coexist.c, compiled as C++17.
#include "dlpack_coexist.c"

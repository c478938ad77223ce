// SPDX-License-Identifier: Apache-2.0
/* Compiles the shared C test producer (tests/dlpack_producer) into this
 * cgo package: cgo compiles only the C files of the package directory. */
#include "../../../../tests/dlpack_producer/dlpack_producer.c"

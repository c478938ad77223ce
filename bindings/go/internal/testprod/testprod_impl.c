/* Compiles the shared C test producer into this cgo package. */
#include "../../../testprod/testprod.c"

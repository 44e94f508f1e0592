/*
 * error.h — the in-tree name of tally's error enum. The enum lives in
 * common/tally_error.h, which is installed as <tally/tally_error.h>: under
 * its own name, since tally.pc puts include/tally on the include path and
 * an installed "error.h" would shadow the C library's <error.h>.
 */
#ifndef TALLY_COMMON_ERROR_H
#define TALLY_COMMON_ERROR_H

#include "common/tally_error.h"

#endif

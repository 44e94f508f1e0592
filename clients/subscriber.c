/* subscriber.c — durable subscribers (being written). */
#include "clients/libtally_internal.h"

/*
 * error.c — names and classes of tally's error codes (see error.h).
 */
#include "common/error.h"

#include <stddef.h>
#include <string.h>

struct error_entry {
    int number;
    const char *name;
    tally_error_class cls;
};

#define CLASS_B TALLY_CLASS_BUSINESS
#define CLASS_V TALLY_CLASS_VALIDATION
#define CLASS_R TALLY_CLASS_REQUEST
#define CLASS_F TALLY_CLASS_FAULT
#define TALLY_ERROR_ENTRY(name, number, cls) {number, #name, CLASS_##cls},
static const struct error_entry error_table[] = {TALLY_ERRORS(TALLY_ERROR_ENTRY)};
#undef TALLY_ERROR_ENTRY

static const struct error_entry *error_find(int code)
{
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++) {
        if (error_table[i].number == code)
            return &error_table[i];
    }
    return NULL;
}

const char *tally_strerror(int code)
{
    const struct error_entry *entry = error_find(code);
    return entry ? entry->name : "unknown_error";
}

tally_error_class tally_error_class_of(int code)
{
    const struct error_entry *entry = error_find(code);
    return entry ? entry->cls : TALLY_CLASS_FAULT;
}

bool tally_error_is_stored(int code)
{
    return tally_error_class_of(code) == TALLY_CLASS_BUSINESS;
}

bool tally_error_is_decided(int code)
{
    tally_error_class cls = tally_error_class_of(code);
    return cls == TALLY_CLASS_BUSINESS || cls == TALLY_CLASS_VALIDATION;
}

int tally_error_from_name(const char *name)
{
    for (size_t i = 0; i < sizeof(error_table) / sizeof(error_table[0]); i++) {
        if (strcmp(error_table[i].name, name) == 0)
            return error_table[i].number;
    }
    return -1;
}

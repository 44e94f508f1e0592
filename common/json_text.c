/*
 * json_text.c — stored strings as JSON strings (json_text.h).
 */
#include "common/json_text.h"

#include <stdlib.h>
#include <string.h>

json_t *json_text(const char *s)
{
    json_t *j = json_string(s);
    if (j || s == NULL)
        return j;
    size_t n = strlen(s);
    char *text = malloc(3 * n + 1), *at = text;
    if (text == NULL)
        return NULL;
    for (const char *p = s; *p; p++) {
        if ((unsigned char)*p < 0x80) {
            *at++ = *p;
        } else {
            memcpy(at, "\xef\xbf\xbd", 3);
            at += 3;
        }
    }
    j = json_stringn(text, (size_t)(at - text));
    free(text);
    return j;
}

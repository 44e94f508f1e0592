/*
 * json_text.c — stored strings as JSON strings (json_text.h).
 */
#include "common/json_text.h"

#include <stdlib.h>
#include <string.h>

json_t *json_textn(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j || s == NULL)
        return j;
    char *text = malloc(3 * n + 1), *at = text;
    if (text == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)s[i] < 0x80) {
            *at++ = s[i];
        } else {
            memcpy(at, "\xef\xbf\xbd", 3);
            at += 3;
        }
    }
    j = json_stringn(text, (size_t)(at - text));
    free(text);
    return j;
}

json_t *json_text(const char *s)
{
    return s ? json_textn(s, strlen(s)) : NULL;
}

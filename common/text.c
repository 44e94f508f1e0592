/*
 * text.c — the growable text buffer and the metric family lines (text.h).
 */
#include "common/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void net_text_printf(net_text *b, const char *fmt, ...)
{
    for (int tries = 0; !b->bad && tries < 2; tries++) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->ptr ? b->ptr + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->bad = true;
            return;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *p = realloc(b->ptr, cap);
        if (p == NULL)
            b->bad = true;
        else
            b->ptr = p, b->cap = cap;
    }
}

void net_text_escaped(net_text *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            net_text_printf(b, "\\%c", *s);
        else if (*s == '\n')
            net_text_printf(b, "\\n");
        else
            net_text_printf(b, "%c", *s);
    }
}

void net_text_free(net_text *b)
{
    free(b->ptr);
    memset(b, 0, sizeof(*b));
}

void net_text_family(net_text *b, const char *name, const char *type, const char *help)
{
    net_text_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void net_text_sample_u64(net_text *b, const char *name, const char *type, const char *help,
                         uint64_t value)
{
    net_text_family(b, name, type, help);
    net_text_printf(b, "%s %llu\n", name, (unsigned long long)value);
}


/*
 * text.h — a growable text buffer (the Prometheus exposition, JSON bodies,
 * HTTP replies) and the two lines every metric family opens with. Shared
 * by tallyd's HTTP face and tally-relay's /metrics (libtallyhttp).
 */
#ifndef TALLY_NET_TEXT_H
#define TALLY_NET_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* bad: out of memory (the text is then incomplete and must not be used). */
typedef struct net_text {
    char *ptr;
    size_t len, cap;
    bool bad;
} net_text;
void net_text_printf(net_text *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s with \ " and newlines escaped (label values, JSON strings). */
void net_text_escaped(net_text *b, const char *s);
void net_text_free(net_text *b);

/* The content type of the Prometheus text exposition format 0.0.4. */
#define NET_TEXT_METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* A metric family's "# HELP" and "# TYPE" lines (type: counter, gauge,
 * histogram). */
void net_text_family(net_text *b, const char *name, const char *type, const char *help);
/* A family with one sample without labels. */
void net_text_sample_u64(net_text *b, const char *name, const char *type, const char *help,
                         uint64_t value);

#endif

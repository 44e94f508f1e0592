/*
 * event_doc.c — an event as tally-relay sends it (docs/RELAY.md, "The
 * event document"): the document of common/event_doc.c, the one
 * definition tallyd's HTTP face gives too, made from the event's stored
 * bytes and bounded by RELAY_DOC_BYTES_MAX; the entity as header text;
 * the NATS subject from its template, and the filter of every subject a
 * template makes.
 */
#include "config.h"

#include "clients/json/format.h"
#include "common/event_doc.h"
#include "relay/relay.h"

#include <stdio.h>
#include <string.h>

int relay_event_doc(const tally_event *e, char **out, size_t *len)
{
    return event_doc_text(e->raw, e->raw_len, RELAY_DOC_BYTES_MAX, out, len);
}

/* Append s (len bytes), percent-encoding what is not printable ASCII, '%'
 * and '/'. */
static size_t percent_append(char *out, size_t at, size_t size, const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len && at + 4 <= size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c > 0x20 && c < 0x7f && c != '%' && c != '/') {
            out[at++] = (char)c;
        } else {
            out[at++] = '%';
            out[at++] = hex[c >> 4];
            out[at++] = hex[c & 15];
        }
    }
    out[at] = '\0';
    return at;
}

void relay_entity_text(const tally_event *e, char out[RELAY_ENTITY_TEXT_BYTES_MAX])
{
    _Static_assert(RELAY_ENTITY_TEXT_BYTES_MAX > sizeof("entitlement:/") + 3 * (128 + 64),
                   "an encoded entitlement fits");
    if (e->kind == TALLY_ENTITY_ACCOUNT) {
        snprintf(out, RELAY_ENTITY_TEXT_BYTES_MAX, "account:%llu",
                 (unsigned long long)e->account_id);
    } else if (e->kind == TALLY_ENTITY_TRANSFER) {
        char hex[33];
        tid_format(&e->transfer_id, hex);
        snprintf(out, RELAY_ENTITY_TEXT_BYTES_MAX, "transfer:%s", hex);
    } else {
        size_t at = (size_t)snprintf(out, RELAY_ENTITY_TEXT_BYTES_MAX, "%s:", e->entity_kind);
        at = percent_append(out, at, RELAY_ENTITY_TEXT_BYTES_MAX, e->subject, e->subject_len);
        out[at++] = '/';
        percent_append(out, at, RELAY_ENTITY_TEXT_BYTES_MAX, e->feature, e->feature_len);
    }
}

bool relay_subject(const char *template_text, const tally_event *e, char *out, size_t size)
{
    size_t at = 0;
    for (const char *p = template_text; *p;) {
        const char *value = NULL;
        if (strncmp(p, "{type}", 6) == 0) {
            value = e->type;
            p += 6;
        } else if (strncmp(p, "{entity_kind}", 13) == 0) {
            value = e->entity_kind;
            p += 13;
        }
        size_t len = value ? strlen(value) : 1;
        if (at + len >= size)
            return false;
        memcpy(out + at, value ? value : p, len);
        at += len;
        if (!value)
            p++;
    }
    out[at] = '\0';
    return at > 0;
}

bool relay_subject_filter(const char *template_text, char *out, size_t size)
{
    const char *brace = strchr(template_text, '{');
    if (brace == NULL)
        return (size_t)snprintf(out, size, "%s", template_text) < size;
    const char *token = brace;
    while (token > template_text && token[-1] != '.')
        token--;
    return (size_t)snprintf(out, size, "%.*s>", (int)(token - template_text), template_text) <
           size;
}

bool relay_subject_within(const char *filter, const char *subject)
{
    for (;;) {
        size_t f = strcspn(filter, "."), s = strcspn(subject, ".");
        if (s == 1 && subject[0] == '>')
            return f > 0;
        if (f == 1 && filter[0] == '>')
            return false; /* a tail of any length, where the subject has a token */
        if (!(s == 1 && subject[0] == '*') && (f != s || strncmp(filter, subject, f) != 0))
            return false;
        if (filter[f] == '\0' || subject[s] == '\0')
            return filter[f] == '\0' && subject[s] == '\0';
        filter += f + 1;
        subject += s + 1;
    }
}

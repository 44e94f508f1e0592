/*
 * event_doc.c — an event as tally-relay sends it (docs/RELAY.md, "The
 * event document"): the JSON of `tally log --json` (clients/json/json.c)
 * with the body's objects under "data", decoded with libtally's accessors
 * (tally_event_part, tally_*_from_msgpack) from either event format; the
 * entity as header text; the NATS subject from its template, and the
 * filter of every subject a template makes. The parts
 * that are arrays (a dead letter, a webhook delivery) become objects with
 * their fields named as in docs/EVENTS.md; a webhook's body is its JSON
 * under "payload", or base64 under "body_base64" when it is not JSON.
 */
#include "config.h"

#include "clients/inbox/tally_inbox.h"
#include "clients/json/json.h"
#include "common/log_event.h"
#include "relay/relay.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The body's parts by role, under the names the document gives them. */
static const struct {
    tally_body_part part;
    const char *name;
} parts[] = {
    {TALLY_PART_ACCOUNT, "account"},
    {TALLY_PART_TRANSFER, "transfer"},
    {TALLY_PART_DEBIT_ACCOUNT, "debit_account"},
    {TALLY_PART_CREDIT_ACCOUNT, "credit_account"},
    {TALLY_PART_ENTITLEMENT, "entitlement"},
};

/* One part as JSON, or NULL when the event has no such part; *bad when the
 * part is there and does not decode. */
static json_t *part_json(const tally_event *e, tally_body_part part, bool *bad)
{
    const msgpack_object *o = tally_event_part(e, part);
    if (o == NULL)
        return NULL;
    int rc = TALLY_corrupt_record;
    json_t *j = NULL;
    if (part == TALLY_PART_TRANSFER) {
        tally_transfer_info t;
        if ((rc = tally_transfer_from_msgpack(o, &t)) == TALLY_ok)
            j = transfer_json(&t);
    } else if (part == TALLY_PART_ENTITLEMENT) {
        tally_entitlement x;
        if ((rc = tally_entitlement_from_msgpack(o, &x)) == TALLY_ok)
            j = entitlement_json(&x);
    } else {
        tally_account a;
        if ((rc = tally_account_from_msgpack(o, &a)) == TALLY_ok)
            j = account_json(&a);
    }
    *bad = rc != TALLY_ok || j == NULL;
    return j;
}

/* The array parts: their fields in order (docs/EVENTS.md). */
static const char *const dead_letter_fields[] = {"subscriber", "seq", "attempts", "parked_ms",
                                                 "error", NULL};
static const char *const webhook_fields[] = {"source", "event_id", "event_type", "signed_at_s",
                                             "body", NULL};

/* A webhook body: its JSON as "payload", else base64 as "body_base64". */
static int body_json(json_t *obj, const char *ptr, uint32_t n)
{
    json_t *payload = json_loadb(ptr, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (payload)
        return json_object_set_new(obj, "payload", payload) == 0 ? TALLY_ok : TALLY_out_of_memory;
    unsigned char *b64 = malloc(4 * ((size_t)n / 3 + 1) + 1);
    if (b64 == NULL)
        return TALLY_out_of_memory;
    int w = EVP_EncodeBlock(b64, (const unsigned char *)ptr, (int)n);
    json_t *s = json_stringn((const char *)b64, (size_t)w);
    free(b64);
    return s && json_object_set_new(obj, "body_base64", s) == 0 ? TALLY_ok : TALLY_out_of_memory;
}

/* An array part as an object of its named fields, or NULL (*rc set). */
static json_t *array_part_json(const msgpack_object *o, const char *const *names, int *rc)
{
    json_t *obj = json_object();
    *rc = obj ? TALLY_ok : TALLY_out_of_memory;
    if (o->type != MSGPACK_OBJECT_ARRAY)
        *rc = TALLY_corrupt_record;
    for (uint32_t i = 0; *rc == TALLY_ok && names[i]; i++) {
        if (i >= o->via.array.size) {
            *rc = TALLY_corrupt_record;
            break;
        }
        const msgpack_object *v = &o->via.array.ptr[i];
        json_t *j = NULL;
        switch (v->type) {
        case MSGPACK_OBJECT_STR: j = json_stringn(v->via.str.ptr, v->via.str.size); break;
        case MSGPACK_OBJECT_POSITIVE_INTEGER: j = json_integer((json_int_t)v->via.u64); break;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: j = json_integer((json_int_t)v->via.i64); break;
        case MSGPACK_OBJECT_NIL: j = json_null(); break;
        case MSGPACK_OBJECT_BIN: *rc = body_json(obj, v->via.bin.ptr, v->via.bin.size); continue;
        default: *rc = TALLY_corrupt_record; continue;
        }
        if (j == NULL || json_object_set_new(obj, names[i], j) != 0)
            *rc = TALLY_out_of_memory;
    }
    if (*rc != TALLY_ok) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

/* {"account": {...}} etc. from the event's body, decoded from its raw
 * bytes (a delivery carries the bytes, not the body). */
static int data_json(const tally_event *e, json_t **out)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event le;
    int rc = log_event_decode(e->raw, e->raw_len, &up, &le);
    json_t *data = rc == TALLY_ok ? json_object() : NULL;
    if (rc == TALLY_ok && data == NULL)
        rc = TALLY_out_of_memory;
    tally_event with_body = *e;
    with_body.body = le.body;
    for (size_t i = 0; rc == TALLY_ok && i < sizeof(parts) / sizeof(parts[0]); i++) {
        bool bad = false;
        json_t *j = part_json(&with_body, parts[i].part, &bad);
        if (bad)
            rc = TALLY_corrupt_record;
        else if (j && json_object_set_new(data, parts[i].name, j) != 0)
            rc = TALLY_out_of_memory;
    }
    const msgpack_object *dl = tally_event_part(&with_body, TALLY_PART_DEAD_LETTER);
    const msgpack_object *wh = tally_event_part(&with_body, TALLY_PART_WEBHOOK);
    if (rc == TALLY_ok && (dl || wh)) {
        json_t *j = array_part_json(dl ? dl : wh, dl ? dead_letter_fields : webhook_fields, &rc);
        if (j && json_object_set_new(data, dl ? "dead_letter" : "webhook", j) != 0)
            rc = TALLY_out_of_memory;
    }
    msgpack_unpacked_destroy(&up);
    if (rc != TALLY_ok) {
        json_decref(data);
        return rc;
    }
    *out = data;
    return TALLY_ok;
}

int relay_event_doc(const tally_event *e, char **out, size_t *len)
{
    json_t *doc = event_json(e), *data = NULL;
    if (doc == NULL)
        return TALLY_out_of_memory;
    int rc = data_json(e, &data);
    if (rc == TALLY_ok && json_object_set_new(doc, "data", data) != 0)
        rc = TALLY_out_of_memory;
    char *text = rc == TALLY_ok ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (rc != TALLY_ok)
        return rc;
    if (text == NULL)
        return TALLY_out_of_memory;
    *len = strlen(text);
    if (*len > RELAY_DOC_BYTES_MAX) {
        free(text);
        return TALLY_corrupt_record;
    }
    *out = text;
    return TALLY_ok;
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

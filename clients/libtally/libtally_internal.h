/*
 * libtally_internal.h — what the parts of libtally share and users never
 * see: the field list a request is packed from, the one request path
 * (client_call), decoded replies and the typed reply decoder, and the event
 * decoder. libtally.c owns the client and the request path; keys.c,
 * writes.c and reads.c the calls built on it; autobatch.c merges
 * concurrent single writes into batch requests; events.c the event decoder;
 * stream.c (the live stream) and subscriber.c (durable subscribers) read
 * the log. None of
 * these names are exported from the shared library (only tally_*).
 */
#ifndef TALLY_LIBTALLY_INTERNAL_H
#define TALLY_LIBTALLY_INTERNAL_H

#include "clients/libtally/events.h"
#include "clients/libtally/tally.h"
#include "common/bytes.h"
#include "common/msgpack_safe.h"

#include <assert.h>
#include <msgpack.h>
#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <stdio.h>
#include <string.h>

#define FIELDS_MAX 24
#define KEY_BUFFER_BYTES (TALLY_CLIENT_KEY_BYTES_MAX + 1)

/* ---- keys (keys.c) ---- */

/* The key of a write into out: the caller's (1..128 bytes) or a new
 * UUIDv7 text. TALLY_ok, TALLY_invalid_argument, TALLY_io_error. */
int client_key_resolve(const char *given, char out[KEY_BUFFER_BYTES]);

/* ---- batches (writes.c): members packed once, when added ---- */

struct tally_batch {
    bool atomic;
    size_t count;
    msgpack_sbuffer members;         /* packed member maps, back to back */
    char (*keys)[KEY_BUFFER_BYTES];  /* batch: member i's key */
    size_t keys_capacity;
    char chain_key[KEY_BUFFER_BYTES]; /* chain: used when sent without a key */
};


/* ---- requests: a field list packed into one msgpack map ---- */

typedef enum field_type {
    FIELD_UINT, FIELD_INT, FIELD_STR, FIELD_ID, FIELD_BOOL, FIELD_OPS, FIELD_UINTS
} field_type;

typedef struct field {
    const char *name;
    field_type type;
    union {
        uint64_t u;
        int64_t i;
        const char *s;
        const uint8_t *id;
        bool b;
        const tally_batch *ops;
        struct {
            const uint64_t *items;
            size_t count;
        } uints;
    } v;
} field;

typedef struct fields {
    field f[FIELDS_MAX];
    unsigned n;
} fields;

static inline field *field_add(fields *fs, const char *name, field_type type)
{
    assert(fs->n < FIELDS_MAX);
    field *f = &fs->f[fs->n++];
    f->name = name;
    f->type = type;
    return f;
}

static inline void put_uint(fields *fs, const char *name, uint64_t v) { field_add(fs, name, FIELD_UINT)->v.u = v; }
static inline void put_int(fields *fs, const char *name, int64_t v) { field_add(fs, name, FIELD_INT)->v.i = v; }
static inline void put_str(fields *fs, const char *name, const char *v) { field_add(fs, name, FIELD_STR)->v.s = v; }
static inline void put_id(fields *fs, const char *name, const tally_uuid *v) { field_add(fs, name, FIELD_ID)->v.id = v->bytes; }
static inline void put_bool(fields *fs, const char *name, bool v) { field_add(fs, name, FIELD_BOOL)->v.b = v; }
static inline void put_ops(fields *fs, const tally_batch *b) { field_add(fs, "ops", FIELD_OPS)->v.ops = b; }
/* An array of unsigned integers; items must outlive the call. */
static inline void put_uints(fields *fs, const char *name, const uint64_t *items, size_t count)
{
    field *f = field_add(fs, name, FIELD_UINTS);
    f->v.uints.items = items;
    f->v.uints.count = count;
}

/* The fields every request starts with: v and op; for writes the consumer
 * (c != NULL) and the key (key != NULL). */
void client_fields_begin(fields *fs, const char *op, const tally_client *c, const char *key);

/* Pack fs as one map into pk; 0 on success, like msgpack-c. */
int client_pack_fields(msgpack_packer *pk, const fields *fs);
/* Pack fs as a batch or chain member: the map without the request's own
 * entries (v, consumer), which the batch carries once; 0 on success. */
int client_pack_member(msgpack_packer *pk, const fields *fs);

/* ---- transport ---- */

/* An NNG error as a tally code: TALLY_ok, TALLY_out_of_memory,
 * TALLY_invalid_argument (bad URL or option), else TALLY_internal. */
int client_nng_error(int rv);
/* The options every client socket gets: the largest message it accepts
 * (a larger one closes the connection) and quick reconnects. Returns an
 * NNG error (0 = ok). */
int client_socket_limit(nng_socket s, size_t recv_bytes_max);
/* The TLS configuration for dialing url with c's TLS files (the publish
 * URL of a stream): *out NULL and TALLY_ok for a URL that is not
 * tls+tcp://; TALLY_invalid_argument when c has no CA. Free *out with
 * nng_tls_config_free (a dialer keeps its own reference). */
int client_tls_config(tally_client *c, const char *url, nng_tls_config **out);

/* ---- replies ---- */

typedef struct reply {
    nng_msg *msg;
    msgpack_unpacked unpacked;
    const msgpack_object *root; /* the reply map; NULL when undecodable */
    int code;                   /* the reply's code; TALLY_internal if undecodable */
} reply;

/* Pack fs and send it with the client's retries (each attempt waits
 * timeout_ms + extra_wait_ms). TALLY_ok with r live (r->code is the
 * server's code; free r with client_reply_free), or the transport code
 * (TALLY_timed_out, TALLY_unreachable, TALLY_out_of_memory,
 * TALLY_request_too_large). */
int client_call(tally_client *c, const fields *fs, uint32_t extra_wait_ms, reply *r);
/* The min_seq c's reads send (tally_client_set_min_seq; 0: none). */
uint64_t client_read_min_seq(const tally_client *c);
/* client_call for a request whose only success is code ok: TALLY_ok with r
 * live, else the transport code or the server's code (r freed). */
int client_read_exchange(tally_client *c, const fields *fs, uint32_t extra_wait_ms, reply *r);
/* The URL list text (comma-separated, none empty, at most
 * TALLY_CLIENT_URLS_MAX): copied into buf (buf_size bytes), *count URLs
 * pointing into it. TALLY_ok or TALLY_invalid_argument. */
int client_url_list_split(const char *text, char *buf, size_t buf_size, const char **urls,
                          unsigned *count);
void client_reply_free(reply *r);

/* A call enters the request path (false, and nothing counted, once
 * tally_client_close has begun) and leaves it; close waits until every
 * call that entered has left. */
bool client_enter(tally_client *c);
void client_leave(tally_client *c);

/* ---- writes (writes.c) ---- */

/* Send one single write or chain (fs complete) and fill out from the reply
 * (out cleared, its key set, before); returns out->code. */
int client_write_exchange(tally_client *c, const fields *fs, tally_result *out);
/* Fill a result from one write's reply map m; returns its code. */
int client_result_fill(tally_result *out, const msgpack_object *m);
/* Send the non-atomic batch b (members packed) as one `batch` request:
 * as client_call. */
int client_batch_call(tally_client *c, const tally_batch *b, reply *r);
/* The `results` array of a batch reply r of count members, or NULL when
 * r's code is not ok or the array is missing or of another length. */
const msgpack_object *client_batch_results(const reply *r, size_t count);

/* ---- auto-batching (autobatch.c) ---- */

typedef struct client_autobatch client_autobatch;

/* The merging state of a client (enabled: merge; else only count).
 * TALLY_ok or TALLY_out_of_memory. */
int client_autobatch_new(bool enabled, client_autobatch **out);
/* Fail every queued write with TALLY_unreachable (nothing sent) and take
 * no more; writes being sent finish as their requests do. */
void client_autobatch_close(client_autobatch *ab);
/* Free it (NULL allowed); no call may be inside. */
void client_autobatch_free(client_autobatch *ab);
client_autobatch *client_autobatch_of(const tally_client *c);
/* Send one single write (fs complete, out cleared with its key set):
 * alone when few requests are in flight, else merged with the other
 * waiting writes into one batch request. Returns out->code. */
int client_autobatch_write(tally_client *c, const fields *fs, tally_result *out);

/* ---- decoding replies ---- */

/* The error code named by a msgpack string; TALLY_internal for anything
 * else (not a string, an unknown name). */
int client_code_of(const msgpack_object *o);

/* Reads typed fields of one reply map, or of a body object in either form
 * (a map, or a row of event format 2: the same fields by position, read in
 * their documented order); ok turns false at the first field that is
 * missing, of another type or out of range. */
typedef struct decoder {
    const msgpack_object *map;
    bool ok;
    uint32_t pos; /* a row's next field */
} decoder;

static inline decoder decoder_of(const msgpack_object *o)
{
    return (decoder){o, o != NULL && o->type == MSGPACK_OBJECT_MAP, 0};
}

/* A body object: a map, or a row. */
static inline decoder decoder_of_record(const msgpack_object *o)
{
    return (decoder){o, o != NULL && (o->type == MSGPACK_OBJECT_MAP ||
                                      o->type == MSGPACK_OBJECT_ARRAY), 0};
}

/* The field: by name in a map; in a row the next one (peek: left for the
 * next call). */
static inline const msgpack_object *dec_field(decoder *d, const char *name, bool peek)
{
    const msgpack_object *o = NULL;
    if (d->ok && d->map->type == MSGPACK_OBJECT_ARRAY)
        o = d->pos < d->map->via.array.size ? &d->map->via.array.ptr[d->pos] : NULL;
    else if (d->ok)
        o = msgpack_safe_map_get(d->map, name);
    d->pos += o != NULL && !peek;
    d->ok = d->ok && o != NULL;
    return o;
}

static inline const msgpack_object *dec_get(decoder *d, const char *name)
{
    return dec_field(d, name, false);
}

static inline uint64_t dec_uint(decoder *d, const char *name, uint64_t max)
{
    uint64_t v = 0;
    const msgpack_object *o = dec_get(d, name);
    d->ok = d->ok && msgpack_safe_get_u64(o, &v) && v <= max;
    return d->ok ? v : 0;
}

static inline int64_t dec_int(decoder *d, const char *name)
{
    int64_t v = 0;
    const msgpack_object *o = dec_get(d, name);
    d->ok = d->ok && msgpack_safe_get_i64(o, &v);
    return d->ok ? v : 0;
}

static inline bool dec_bool(decoder *d, const char *name)
{
    const msgpack_object *o = dec_get(d, name);
    d->ok = d->ok && o->type == MSGPACK_OBJECT_BOOLEAN;
    return d->ok && o->via.boolean;
}

/* A field that may be nil: false (and no change) when nil; else the field
 * is left for the dec_* call that reads it. */
static inline bool dec_present(decoder *d, const char *name)
{
    const msgpack_object *o = dec_field(d, name, true);
    bool present = d->ok && o->type != MSGPACK_OBJECT_NIL;
    if (d->ok && !present)
        dec_get(d, name); /* a nil is read here */
    return present;
}

/* Whether the record has a next field name at all: fields added at a
 * record's end (user data) are absent from older servers' replies and
 * events; false leaves the decoder as it was. */
static inline bool dec_has(decoder *d, const char *name)
{
    if (!d->ok)
        return false;
    if (d->map->type == MSGPACK_OBJECT_ARRAY)
        return d->pos < d->map->via.array.size;
    return msgpack_safe_map_get(d->map, name) != NULL;
}

/* A string into out (capacity bytes with the NUL); "" when it fails. */
static inline void dec_str(decoder *d, const char *name, char *out, size_t capacity)
{
    tally_str s = {NULL, 0};
    const msgpack_object *o = dec_get(d, name);
    d->ok = d->ok && msgpack_safe_get_str(o, &s) && s.len < capacity;
    if (d->ok)
        memcpy(out, s.ptr, s.len);
    out[d->ok ? s.len : 0] = '\0';
}

/* A state: its name (a map) or its number (a row), named by name_of
 * (log_transfer_state_name, log_entitlement_state_name); "" when it fails. */
static inline void dec_state(decoder *d, const char *name, const char *(*name_of)(uint64_t),
                             char *out, size_t capacity)
{
    const msgpack_object *o = dec_field(d, name, true);
    uint64_t n;
    if (d->ok && o->type != MSGPACK_OBJECT_STR) {
        const char *s = msgpack_safe_get_u64(o, &n) ? name_of(n) : NULL;
        dec_get(d, name);
        d->ok = d->ok && s != NULL && strlen(s) < capacity;
        snprintf(out, capacity, "%s", d->ok ? s : "");
        return;
    }
    dec_str(d, name, out, capacity);
}

static inline void dec_id(decoder *d, const char *name, tally_uuid *out)
{
    tally_id128 id;
    const msgpack_object *o = dec_get(d, name);
    d->ok = d->ok && msgpack_safe_get_id128(o, &id);
    if (d->ok)
        memcpy(out->bytes, id.bytes, 16);
}

/* What endpoint_get's reply and endpoint_list's entries share: the name,
 * the state ("enabled" or "disabled", else d fails), version, changed_ms. */
static inline void dec_endpoint_head(decoder *d, char *name, size_t capacity, bool *disabled,
                                     uint64_t *version, int64_t *changed_ms)
{
    char state[16];
    dec_str(d, "endpoint", name, capacity);
    dec_str(d, "state", state, sizeof(state));
    *version = dec_uint(d, "version", UINT64_MAX);
    *changed_ms = dec_int(d, "changed_ms");
    *disabled = strcmp(state, "disabled") == 0;
    d->ok = d->ok && (*disabled || strcmp(state, "enabled") == 0);
}

/* The three user data fields, when the record has them (else 0). */
static inline void dec_user_data(decoder *d, tally_user_data *out)
{
    memset(out, 0, sizeof(*out));
    if (dec_has(d, "user_data_128"))
        dec_id(d, "user_data_128", &out->user_data_128);
    if (dec_has(d, "user_data_64"))
        out->user_data_64 = dec_uint(d, "user_data_64", UINT64_MAX);
    if (dec_has(d, "user_data_32"))
        out->user_data_32 = (uint32_t)dec_uint(d, "user_data_32", UINT32_MAX);
}

typedef bool (*decode_fn)(const msgpack_object *o, void *out);

/* The decoders of reply objects (reads.c), which also read the objects of
 * event bodies (the inbox helper's tally_*_from_msgpack): false when o is
 * not such an object; out is a tally_account, tally_transfer_info or
 * tally_entitlement. */
bool client_account_decode(const msgpack_object *o, void *out);
bool client_transfer_decode(const msgpack_object *o, void *out);
bool client_entitlement_decode(const msgpack_object *o, void *out);

/* Decode up to capacity elements of array o into out (stride bytes each);
 * *count gets how many decoded, also when one fails (false). */
bool client_array_decode(const msgpack_object *o, decode_fn decode, void *out, size_t stride,
                         size_t capacity, size_t *count);

/* A read whose reply carries an array under name: up to capacity elements
 * decoded into out (see client_array_decode). TALLY_ok, the codes of
 * client_read_exchange, or TALLY_internal for an array of the wrong shape. */
int client_read_array(tally_client *c, const fields *fs, const char *name, decode_fn decode,
                      void *out, size_t stride, size_t capacity, size_t *count);

/* A paged read: "entries" decoded as by client_read_array, *next from
 * "next" (0 when nil: no more pages). */
int client_read_page(tally_client *c, const fields *fs, decode_fn decode, void *out,
                     size_t stride, size_t capacity, size_t *count, uint64_t *next);

/* ---- durable subscribers (subscriber.c, subscriber_info.c) ---- */

static inline bool client_sub_name_ok(const char *name)
{
    return name != NULL && *name != '\0' && strlen(name) <= TALLY_CLIENT_SUBSCRIBER_NAME_BYTES_MAX;
}

/* The fields of a subscriber op: v, op, name. */
static inline void client_sub_fields(fields *fs, const char *op, const char *name)
{
    client_fields_begin(fs, op, NULL, NULL);
    put_str(fs, "name", name);
}

/* A request whose reply carries one metrics map under "subscriber" into
 * *out (and "created" into *created, unless NULL). TALLY_ok, the codes of
 * client_read_exchange, or TALLY_internal for a reply of the wrong shape. */
int client_sub_info_exchange(tally_client *c, const fields *fs, tally_subscriber_info *out,
                             bool *created);

/* The limit to ask for: limit (0: dflt) within capacity and max. */
static inline uint32_t client_page_limit(uint32_t limit, size_t capacity, uint32_t dflt,
                                         uint32_t max)
{
    uint64_t n = limit ? limit : dflt;
    if (n > capacity)
        n = capacity;
    return (uint32_t)(n < max ? n : max);
}

#endif

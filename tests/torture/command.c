/*
 * command.c — the torture harness's commands: where they are kept, the
 * request bytes each one is sent as, and the answers it got (torture.h).
 */
#include "tests/torture/torture.h"

#include "common/error.h"
#include "common/msgpack_safe.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const torture_subjects[TORTURE_ENTITLEMENTS] = {"alice", "alice", "bob",
                                                            "bob",   "carol", "carol"};
const char *const torture_features[TORTURE_ENTITLEMENTS] = {"pro", "beta", "pro",
                                                            "beta", "pro", "beta"};

void torture_store_init(torture_store *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
}

void torture_store_free(torture_store *s)
{
    for (uint32_t i = 0; i < TORTURE_CHUNKS_MAX; i++)
        free(s->chunks[i]);
    pthread_mutex_destroy(&s->lock);
}

torture_cmd *torture_cmd_new(torture_store *s)
{
    pthread_mutex_lock(&s->lock);
    torture_cmd *c = NULL;
    uint32_t chunk = s->count / TORTURE_CHUNK_COMMANDS;
    if (chunk < TORTURE_CHUNKS_MAX && s->chunks[chunk] == NULL)
        s->chunks[chunk] = calloc(TORTURE_CHUNK_COMMANDS, sizeof(torture_cmd));
    if (chunk < TORTURE_CHUNKS_MAX && s->chunks[chunk] != NULL) {
        c = &s->chunks[chunk][s->count % TORTURE_CHUNK_COMMANDS];
        c->index = s->count++;
        c->count = 1;
    }
    pthread_mutex_unlock(&s->lock);
    return c;
}

torture_cmd *torture_cmd_at(const torture_store *s, uint32_t i)
{
    return &s->chunks[i / TORTURE_CHUNK_COMMANDS][i % TORTURE_CHUNK_COMMANDS];
}

void torture_fail(torture_store *s, const char *fmt, ...)
{
    char text[TORTURE_FAILURE_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    fprintf(stderr, "torture: FAILED: %s\n", text);
    pthread_mutex_lock(&s->lock);
    if (s->failures < TORTURE_FAILURES_KEPT)
        memcpy(s->failure[s->failures], text, sizeof(text));
    s->failures++;
    pthread_mutex_unlock(&s->lock);
}

uint64_t torture_failures(torture_store *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t n = s->failures;
    pthread_mutex_unlock(&s->lock);
    return n;
}

void torture_key(const torture_cmd *c, char out[TORTURE_KEY_BYTES_MAX])
{
    snprintf(out, TORTURE_KEY_BYTES_MAX, "cmd-%" PRIu32, c->index);
}

uint32_t torture_expected_events(const torture_cmd *c) { return c->count; }

/* ---- requests ---- */

static void pack_uint(msgpack_packer *pk, const char *name, uint64_t v)
{
    msgpack_safe_pack_cstr(pk, name);
    msgpack_pack_uint64(pk, v);
}

static void pack_id(msgpack_packer *pk, const char *name, const tally_id128 *id)
{
    msgpack_safe_pack_cstr(pk, name);
    msgpack_safe_pack_bin(pk, id->bytes, sizeof(id->bytes));
}

static void pack_text(msgpack_packer *pk, const char *name, const char *v)
{
    msgpack_safe_pack_cstr(pk, name);
    msgpack_safe_pack_cstr(pk, v);
}

/* The fields that define w (not v, consumer, key); returns how many. */
static uint32_t pack_write_fields(msgpack_packer *pk, const torture_write *w)
{
    uint32_t n = 0;
    switch (w->kind) {
    case LEDGER_ACCOUNT_OPEN:
        pack_uint(pk, "id", w->debit);
        pack_uint(pk, "ledger", TORTURE_LEDGER);
        pack_uint(pk, "code", TORTURE_CODE);
        pack_uint(pk, "flags", w->account_flags);
        if (w->timestamp_ms) {
            msgpack_safe_pack_cstr(pk, "timestamp_ms");
            msgpack_pack_int64(pk, w->timestamp_ms);
            return 5;
        }
        return 4;
    case LEDGER_TRANSFER:
        pack_id(pk, "id", &w->id);
        pack_uint(pk, "debit_account_id", w->debit);
        pack_uint(pk, "credit_account_id", w->credit);
        msgpack_safe_pack_cstr(pk, "amount");
        msgpack_pack_int64(pk, w->amount);
        pack_uint(pk, "ledger", TORTURE_LEDGER);
        pack_uint(pk, "code", TORTURE_CODE);
        pack_uint(pk, "flags", (w->pending ? LEDGER_TRANSFER_PENDING : 0) | w->more_flags |
                                   (w->timestamp_ms ? LEDGER_TRANSFER_IMPORTED : 0));
        n = 7;
        if (w->timestamp_ms) {
            msgpack_safe_pack_cstr(pk, "timestamp_ms");
            msgpack_pack_int64(pk, w->timestamp_ms);
            n++;
        }
        if (w->pending && w->timeout_s) {
            pack_uint(pk, "timeout_s", w->timeout_s);
            n++;
        }
        if (w->user_data_64) {
            pack_uint(pk, "user_data_64", w->user_data_64);
            n++;
        }
        return n;
    case LEDGER_REVERSE:
        pack_id(pk, "id", &w->id);
        pack_id(pk, "reverses", &w->reverses);
        msgpack_safe_pack_cstr(pk, "amount");
        msgpack_pack_int64(pk, w->amount);
        return 3;
    case LEDGER_POST:
    case LEDGER_VOID:
        pack_id(pk, "pending_id", &w->id);
        if (w->kind == LEDGER_POST && w->amount != 0) {
            msgpack_safe_pack_cstr(pk, "amount");
            msgpack_pack_int64(pk, w->amount);
            return 2;
        }
        return 1;
    default: /* grant, extend, revoke */
        pack_text(pk, "subject", torture_subjects[w->entitlement]);
        pack_text(pk, "feature", torture_features[w->entitlement]);
        pack_uint(pk, "source_order", w->source_order);
        n = 3;
        if (w->kind != LEDGER_REVOKE && w->valid_until_ms != 0) {
            msgpack_safe_pack_cstr(pk, "valid_until_ms");
            msgpack_pack_int64(pk, w->valid_until_ms);
            n++;
        }
        if (w->kind == LEDGER_GRANT && w->has_grant_transfer) {
            pack_id(pk, "grant_transfer_id", &w->id);
            n++;
        }
        return n;
    }
}

/* A map: op, `head` more entries packed by pack_head, then w's fields
 * (none when w is NULL). The map's size is known only once the fields are
 * packed, so they go to a side buffer first. */
static void pack_write_map(msgpack_packer *pk, uint32_t head, const char *op,
                           const torture_write *w, void (*pack_head)(msgpack_packer *, const void *),
                           const void *ctx)
{
    msgpack_sbuffer fields;
    msgpack_packer fpk;
    msgpack_sbuffer_init(&fields);
    msgpack_packer_init(&fpk, &fields, msgpack_sbuffer_write);
    uint32_t n = w ? pack_write_fields(&fpk, w) : 0;
    msgpack_pack_map(pk, 1 + head + n);
    pack_text(pk, "op", op);
    if (pack_head)
        pack_head(pk, ctx);
    msgpack_sbuffer_write(pk->data, fields.data, fields.size);
    msgpack_sbuffer_destroy(&fields);
}

/* v, consumer, key, and for a chain its ops. */
/* $TALLY_TOKEN (set by the harness under TALLY_TEST_AUTH=1): the requests
 * sent by hand carry it as libtally's do; NULL when unset. */
static const char *torture_token(void)
{
    const char *t = getenv("TALLY_TOKEN");
    return t && *t ? t : NULL;
}

static void pack_envelope(msgpack_packer *pk, const void *ctx)
{
    const torture_cmd *c = ctx;
    char key[TORTURE_KEY_BYTES_MAX];
    torture_key(c, key);
    pack_uint(pk, "v", 1);
    pack_text(pk, "consumer", TORTURE_CONSUMER);
    pack_text(pk, "key", key);
    if (torture_token())
        pack_text(pk, "auth", torture_token());
    if (!c->chain)
        return;
    msgpack_safe_pack_cstr(pk, "ops");
    msgpack_pack_array(pk, c->count);
    for (uint32_t i = 0; i < c->count; i++)
        pack_write_map(pk, 0, ledger_command_name(c->w[i].kind), &c->w[i], NULL, NULL);
}

void torture_request_pack(const torture_cmd *c, msgpack_sbuffer *sb)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    uint32_t envelope = torture_token() ? 4 : 3;
    if (c->chain)
        pack_write_map(&pk, envelope + 1, "chain", NULL, pack_envelope, c);
    else
        pack_write_map(&pk, envelope, ledger_command_name(c->w[0].kind), &c->w[0], pack_envelope, c);
}

/* ---- answers ---- */

static int code_named(const msgpack_object *o)
{
    tally_str name;
    char text[64];
    if (!msgpack_safe_get_str(o, &name) || name.len >= sizeof(text))
        return -1;
    memcpy(text, name.ptr, name.len);
    text[name.len] = '\0';
    return tally_error_from_name(text);
}

/* Decode a write reply into *a; false when it lacks the documented shape. */
static bool answer_decode(const msgpack_object *m, bool chain, torture_answer *a)
{
    memset(a, 0, sizeof(*a));
    a->failed_index = -1;
    a->code = code_named(msgpack_safe_map_get(m, "code"));
    const msgpack_object *replayed = msgpack_safe_map_get(m, "replayed");
    const msgpack_object *seq = msgpack_safe_map_get(m, "seq");
    uint64_t events = 0;
    if (a->code < 0 || replayed == NULL || replayed->type != MSGPACK_OBJECT_BOOLEAN ||
        seq == NULL || !msgpack_safe_get_u64(msgpack_safe_map_get(m, "events"), &events) ||
        events > UINT32_MAX)
        return false;
    a->replayed = replayed->via.boolean;
    a->events = (uint32_t)events;
    if (seq->type != MSGPACK_OBJECT_NIL && !msgpack_safe_get_u64(seq, &a->seq))
        return false;
    if (!chain)
        return true;
    const msgpack_object *codes = msgpack_safe_map_get(m, "codes");
    const msgpack_object *failed = msgpack_safe_map_get(m, "failed_index");
    uint64_t index;
    if (codes == NULL || codes->type != MSGPACK_OBJECT_ARRAY ||
        codes->via.array.size > TORTURE_MEMBERS_MAX || failed == NULL)
        return false;
    for (uint32_t i = 0; i < codes->via.array.size; i++) {
        int code = code_named(&codes->via.array.ptr[i]);
        if (code < 0)
            return false;
        a->member_codes[i] = (uint8_t)code;
    }
    if (failed->type != MSGPACK_OBJECT_NIL) {
        if (!msgpack_safe_get_u64(failed, &index) || index >= TORTURE_MEMBERS_MAX)
            return false;
        a->failed_index = (int)index;
    }
    return true;
}

static bool answer_same_outcome(const torture_answer *a, const torture_answer *b)
{
    return a->code == b->code && a->seq == b->seq && a->events == b->events &&
           a->failed_index == b->failed_index &&
           memcmp(a->member_codes, b->member_codes, sizeof(a->member_codes)) == 0;
}

/* Compare a decided answer with the earlier ones of its key and keep it.
 * Called with the store's lock held; returns a failure text or NULL. */
static const char *answer_keep(torture_store *s, torture_cmd *c, const torture_answer *a)
{
    if (a->replayed)
        s->replayed_answers++;
    else
        s->fresh_answers++;
    c->fresh += !a->replayed;
    if (c->answers++ == 0) {
        c->first = *a;
        return NULL;
    }
    if (!a->replayed && c->fresh > 1)
        return "a second answer that was not replayed: applied twice";
    if (!answer_same_outcome(a, &c->first))
        return "an answer differs from the key's first";
    return NULL;
}

/* Why a reply with this code is wrong for c, or NULL; *retry when it is
 * a fault to send again. */
static const char *reply_judge(int code, bool *retry)
{
    *retry = false;
    if (code < 0)
        return "a reply without the documented shape";
    if (tally_error_class_of(code) == TALLY_CLASS_FAULT) {
        *retry = true;
        return NULL;
    }
    if (!tally_error_is_stored(code))
        return "refused (the request is well formed)";
    if (code == TALLY_idempotency_key_reused)
        return "idempotency_key_reused for the same request bytes";
    return NULL;
}

bool torture_answer_record(torture_store *s, torture_cmd *c, const void *reply, size_t len)
{
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    bool map = msgpack_safe_unpack(reply, len, 8, &up) == TALLY_ok &&
               up.data.type == MSGPACK_OBJECT_MAP;
    int code = map ? code_named(msgpack_safe_map_get(&up.data, "code")) : -1;
    bool retry;
    const char *failure = reply_judge(code, &retry);
    torture_answer a;
    if (failure == NULL && !retry && !answer_decode(&up.data, c->chain, &a))
        failure = "a reply without the documented shape";
    if (failure == NULL && !retry) {
        pthread_mutex_lock(&s->lock);
        failure = answer_keep(s, c, &a);
        pthread_mutex_unlock(&s->lock);
    }
    msgpack_unpacked_destroy(&up);
    if (failure) {
        char key[TORTURE_KEY_BYTES_MAX];
        torture_key(c, key);
        torture_fail(s, "%s: %s (code %s)", key, failure, code >= 0 ? tally_strerror(code) : "?");
    }
    return !retry;
}

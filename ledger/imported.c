/*
 * imported.c — the rules of a caller-given creation time against the
 * store and the mark of the last one (imported.h).
 */
#include "ledger/imported.h"

#include "common/bytes.h"
#include "common/error.h"
#include "log/log.h"

#include <string.h>

const char ledger_imported_last_key[] = "imported_last";

#define IMPORTED_LAST_BYTES 16

/* The time of the event at seq; INT64_MAX when log retention removed it:
 * its time unknown, nothing may be imported before it. */
static int event_ms(store_txn *t, uint64_t seq, int64_t *out_ms)
{
    *out_ms = INT64_MAX;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    int rc = log_event_load(t, seq, &up, &ev);
    if (rc == TALLY_ok)
        *out_ms = ev.time_ms;
    msgpack_unpacked_destroy(&up);
    return rc == TALLY_not_found ? TALLY_ok : rc;
}

int ledger_imported_watermark(store_txn *t, int64_t *out_ms)
{
    *out_ms = 0;
    log_head head;
    int rc = log_head_get(t, &head);
    if (rc != TALLY_ok || head.seq == 0)
        return rc;
    int64_t last_ms = 0;
    uint64_t last_seq = 0;
    MDB_val v;
    rc = store_get(t, STORE_DB_META, ledger_imported_last_key, strlen(ledger_imported_last_key),
                   &v);
    if (rc == TALLY_ok) {
        if (v.mv_size != IMPORTED_LAST_BYTES)
            return TALLY_corrupt_record;
        last_ms = (int64_t)get_u64_be(v.mv_data);
        last_seq = get_u64_be((const uint8_t *)v.mv_data + 8);
    } else if (rc != TALLY_not_found) {
        return rc;
    }
    if (last_seq == head.seq) { /* the last event is the last import */
        *out_ms = last_ms;
        return TALLY_ok;
    }
    rc = event_ms(t, head.seq, out_ms);
    if (rc == TALLY_ok && last_ms > *out_ms)
        *out_ms = last_ms;
    return rc;
}

int ledger_imported_check(ledger_ctx *ctx, int64_t timestamp_ms)
{
    if (timestamp_ms >= ctx->now_ms)
        return TALLY_imported_event_timestamp_must_not_advance;
    int64_t watermark;
    int rc = ledger_imported_watermark(ctx->txn, &watermark);
    if (rc != TALLY_ok)
        return rc;
    return timestamp_ms <= watermark ? TALLY_imported_event_timestamp_must_not_regress : TALLY_ok;
}

int ledger_imported_note(ledger_ctx *ctx, int64_t timestamp_ms, uint64_t seq)
{
    uint8_t v[IMPORTED_LAST_BYTES];
    put_u64_be(v, (uint64_t)timestamp_ms);
    put_u64_be(v + 8, seq);
    return store_put(ctx->txn, STORE_DB_META, ledger_imported_last_key,
                     strlen(ledger_imported_last_key), v, sizeof(v), 0);
}

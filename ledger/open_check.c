/*
 * open_check.c — the quick structural check at open (open_check.h): the
 * head record against the last event and the hash chain of the last
 * events, with the chain rules tally-recon's whole-log walk uses
 * (log_chain_step, log/log.h).
 */
#include "ledger/open_check.h"

#include "common/error.h"
#include "common/limits.h"
#include "ledger/retention.h"
#include "log/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAIL_FAULT (-1) /* tail_event stopped the read at a fault: no tally_error */

typedef struct tail_walk {
    log_chain chain;
    uint64_t events;
    uint64_t bad_seq;       /* the event a fault was found at */
    unsigned faults;
    uint64_t expected_seq;  /* with LOG_CHAIN_GAP */
    uint64_t carried_seq;   /* with LOG_CHAIN_SEQ_DIFFERS */
    uint64_t head_seq;      /* meta "head"'s seq */
    bool head_hash_differs; /* the last event is whole, but its hash is not the head's */
} tail_walk;

/* The last event of a store of format 13 takes its hash from the head
 * (log/log.h): when it does not decode, whether it would with the hash
 * of its own bytes, i.e. whether it is whole and the head holds another
 * hash. Then the chain goes on with that decoding. */
static bool whole_but_for_the_head(const void *bytes, size_t len, msgpack_unpacked *up,
                                   log_event *ev)
{
    static const size_t entry = LOG_HASH_ENTRY_BYTES;
    if (len > TALLY_EVENT_BYTES_MAX || len < 2 * entry || ((const uint8_t *)bytes)[0] != 0x9c)
        return false;
    uint8_t *copy = malloc(len);
    if (copy == NULL)
        return false;
    memcpy(copy, bytes, len);
    uint8_t prev[LOG_HASH_BYTES];
    memcpy(prev, copy + len - entry - LOG_HASH_BYTES, LOG_HASH_BYTES);
    /* the copy goes with the decoding, which points into it */
    if (log_event_hash(prev, copy, len, copy + len - LOG_HASH_BYTES) == TALLY_ok &&
        log_event_decode(copy, len, up, ev) == TALLY_ok &&
        msgpack_zone_push_finalizer(up->zone, free, copy))
        return true;
    free(copy);
    return false;
}

static int tail_event(uint64_t seq, const void *bytes, size_t len, void *ctx)
{
    tail_walk *w = ctx;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    log_event ev;
    bool decoded = log_event_decode(bytes, len, &up, &ev) == TALLY_ok;
    if (!decoded && seq == w->head_seq && whole_but_for_the_head(bytes, len, &up, &ev)) {
        decoded = true;
        w->head_hash_differs = true;
    }
    w->expected_seq = w->chain.expect_seq;
    w->carried_seq = decoded ? ev.seq : 0;
    w->faults = log_chain_step(&w->chain, seq, decoded ? &ev : NULL);
    msgpack_unpacked_destroy(&up);
    w->events++;
    if (w->faults == 0)
        return 0;
    w->bad_seq = seq;
    return TAIL_FAULT; /* the first fault is enough to refuse */
}

/* The first fault of an event, in words. */
static int event_fault(const char *file, const tail_walk *w, char *why, size_t why_bytes)
{
    uint64_t seq = w->bad_seq;
    const int bad = TALLY_corrupt_record;
    if (w->faults & LOG_CHAIN_GAP)
        return store_why(why, why_bytes, bad,
                         "%s: the log jumps from seq %" PRIu64 " to seq %" PRIu64
                         " (events missing)", file, w->expected_seq - 1, seq);
    if (w->faults & LOG_CHAIN_UNDECODED)
        return store_why(why, why_bytes, bad,
                         "%s: the event at seq %" PRIu64 " does not decode or its hash is wrong",
                         file, seq);
    if (w->faults & LOG_CHAIN_SEQ_DIFFERS)
        return store_why(why, why_bytes, bad,
                         "%s: the event stored at seq %" PRIu64 " carries seq %" PRIu64, file,
                         seq, w->carried_seq);
    return store_why(why, why_bytes, bad,
                     "%s: the event at seq %" PRIu64 " does not chain to the one before it (its "
                     "prev_hash is not that event's hash)", file, seq);
}

int ledger_open_check(store_txn *t, uint64_t events_max, ledger_open_check_result *result,
                      char *why, size_t why_bytes)
{
    char file[TALLY_PATH_BYTES_MAX + 16];
    snprintf(file, sizeof(file), "%s/data.mdb", store_path(t->st));
    memset(result, 0, sizeof(*result));
    log_head head;
    int rc = log_head_get(t, &head);
    if (rc != TALLY_ok)
        return store_why(why, why_bytes, rc, "%s: the head record (meta \"head\") %s", file,
                         rc == TALLY_corrupt_record ? "is garbled" : tally_strerror(rc));
    result->head_seq = head.seq;
    ledger_log_floor floor;
    rc = ledger_log_floor_get(t, &floor);
    if (rc != TALLY_ok && rc != TALLY_not_found)
        return store_why(why, why_bytes, rc,
                         "%s: the retention floor record (meta \"log_floor\"): %s", file,
                         tally_strerror(rc));
    uint64_t first = 0, last = 0;
    rc = log_first_seq(t, &first);
    if (rc == TALLY_ok)
        rc = log_last_seq(t, &last);
    if (rc != TALLY_ok)
        return store_why(why, why_bytes, rc, "%s: the log cannot be read: %s", file,
                         tally_strerror(rc));
    /* From the start of the log (chained to zeros or the floor's hash)
     * when it is short, else events_max from its end (chained as found). */
    tail_walk w = {.head_seq = head.seq};
    uint64_t from = floor.seq + 1;
    if (last >= from && last - from + 1 > events_max) {
        from = last - events_max + 1;
        log_chain_start(&w.chain, from, NULL);
    } else {
        log_chain_start(&w.chain, from, floor.hash);
    }
    if (last >= from && events_max > 0) {
        result->from_seq = first > from ? first : from;
        rc = log_read(t, from, events_max, tail_event, &w);
        result->events = w.events;
        if (rc == TAIL_FAULT)
            return event_fault(file, &w, why, why_bytes);
        if (rc != TALLY_ok)
            return store_why(why, why_bytes, rc, "%s: the log cannot be read: %s", file,
                             tally_strerror(rc));
    }
    unsigned end = w.head_hash_differs ? LOG_CHAIN_HEAD_HASH : log_chain_end(&w.chain, &head);
    if (end == LOG_CHAIN_HEAD_GAP && head.seq == 0)
        return store_why(why, why_bytes, TALLY_corrupt_record,
                         "%s: the head record (meta \"head\") is missing, but the log ends at "
                         "seq %" PRIu64, file, w.chain.expect_seq - 1);
    if (end == LOG_CHAIN_HEAD_GAP)
        return store_why(why, why_bytes, TALLY_corrupt_record,
                         "%s: the head record (meta \"head\") names seq %" PRIu64
                         ", but the log ends at seq %" PRIu64, file, head.seq,
                         w.chain.expect_seq - 1);
    if (end == LOG_CHAIN_HEAD_HASH)
        return store_why(why, why_bytes, TALLY_corrupt_record,
                         "%s: the head record (meta \"head\") holds another hash than the "
                         "last event (seq %" PRIu64 "): the head or that event is damaged",
                         file, head.seq);
    return TALLY_ok;
}

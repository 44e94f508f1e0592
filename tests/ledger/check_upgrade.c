/*
 * check_upgrade.c — a store of format 8 upgraded in place to the current
 * format (log/store.h): the layouts formats 9 to 13 changed are read as
 * format 8 wrote them, beside the new ones.
 *
 * What must hold, on a store whose transfer_index user data entries hold
 * the transfer's id (format 8; none since 9), whose "history" holds one
 * entry per seq (none since 10) and whose inbox records have fixed-width
 * fields (formats 2 and 3; format 4 since 11) under keys as given (a
 * UUID's text packed since 12) and whose log holds events in format 2
 * (stored short since 13):
 *   - read only, and after a writer marked it current (tallyd --upgrade,
 *     nothing rewritten), tally-recon finds nothing;
 *   - transfer_query by user data, account_history and the replay of every
 *     stored key (its code, first seq, event count and original seq) give
 *     what they gave before the store was made format 8;
 *   - the keys that are a UUID's text, stored as text before format 12,
 *     are found (the upgrade marks the store: a lookup that misses the
 *     packed key tries the text), and inbox retention removes the mark
 *     with the last record of before;
 *   - new commands write the new forms (entries without an id, history
 *     blocks, inbox records of format 4 under packed keys, short events
 *     chained to the format 2 ones), and the
 *     queries, the history and the audit take old and new together, in
 *     order.
 */
#include "tests/support/test_support.h"

#include "common/bytes.h"
#include "ledger/history.h"
#include "ledger/history_block.h"
#include "ledger/inbox.h"
#include "ledger/inbox_time.h"
#include "ledger/retention.h"
#include "ledger/index.h"
#include "ledger/query.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#define ACCOUNTS 4
#define OLD_TRANSFERS 40
#define NEW_TRANSFERS 24
#define SEQS_MAX 256

typedef struct before {
    uint64_t history[ACCOUNTS + 1][SEQS_MAX];
    uint32_t history_n[ACCOUNTS + 1];
    ledger_outcome outcomes[OLD_TRANSFERS + 1];
} before;

static ledger_command transfer(uint64_t i)
{
    ledger_command c = test_cmd_transfer(100 + i, 1 + i % ACCOUNTS, 1 + (i + 1) % ACCOUNTS, 1);
    c.u.transfer.user_data.user_data_64 = 7;
    c.u.transfer.user_data.user_data_32 = (uint32_t)(1 + i % 3);
    c.u.transfer.user_data.user_data_128.bytes[0] = (uint8_t)(i + 1);
    return c;
}

/* Every other key is a UUID's text (packed since format 12). */
static void key_of(uint64_t i, char out[40])
{
    if (i % 2 == 0)
        snprintf(out, 40, "0190ffff-0000-7000-8000-%012llx", (unsigned long long)i);
    else
        snprintf(out, 40, "k-%llu", (unsigned long long)i);
}

static void history_of(test_store *ts, uint64_t account, uint64_t *seqs, uint32_t *n)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(ledger_history_seqs(&t, account, false, 0, seqs, SEQS_MAX, n), TALLY_ok);
    store_txn_abort(&t);
}

/* Transfers with user data, and a rejection with an original seq. */
static void fill(test_store *ts, before *b)
{
    test_store_open(ts);
    for (uint64_t a = 1; a <= ACCOUNTS; a++)
        test_setup_ok(ts, test_cmd_open(a, 1, 0));
    char key[40];
    for (uint64_t i = 0; i < OLD_TRANSFERS; i++) {
        ledger_command c = transfer(i);
        key_of(i, key);
        b->outcomes[i] = test_apply(ts, "up", key, &c);
        ck_assert_int_eq(b->outcomes[i].code, TALLY_ok);
        ts->now_ms++;
    }
    ledger_command other = transfer(3);
    other.u.transfer.amount = 2;
    b->outcomes[OLD_TRANSFERS] = test_apply(ts, "up", "other", &other);
    ck_assert_int_eq(b->outcomes[OLD_TRANSFERS].code, TALLY_exists_with_different_amount);
    ck_assert_uint_ne(b->outcomes[OLD_TRANSFERS].original_seq, 0);
    test_history_fold(ts);
    for (uint64_t a = 1; a <= ACCOUNTS; a++)
        history_of(ts, a, b->history[a], &b->history_n[a]);
}

/* Format 2 (or 3, with original_seq and the failed id) of a record. */
static size_t inbox_fixed(const ledger_inbox_record *r, uint8_t out[128])
{
    const ledger_outcome *o = &r->outcome;
    out[0] = o->original_seq || !tally_id128_is_zero(&o->failed_id) ? 3 : 2;
    memcpy(out + 1, r->fingerprint, 16);
    put_u16_be(out + 17, (uint16_t)o->code);
    put_u64_be(out + 19, (uint64_t)o->time_ms);
    put_u64_be(out + 27, o->first_seq);
    put_u32_be(out + 35, o->event_count);
    out[39] = (uint8_t)o->chain_count, out[40] = (uint8_t)o->failed_index;
    size_t len = 41;
    for (uint32_t i = 0; i < o->chain_count; i++, len += 2)
        put_u16_be(out + len, o->chain_codes[i]);
    if (out[0] == 3) {
        put_u64_be(out + len, o->original_seq);
        memcpy(out + len + 8, o->failed_id.bytes, 16);
        len += 24;
    }
    return len;
}

/* An inbox key as format 8 stored it (a UUID's text as text) into out:
 * its length. */
static size_t text_key(const void *k, size_t len, uint8_t out[LEDGER_INBOX_KEY_BYTES_MAX])
{
    tally_str consumer, key;
    char text[LEDGER_INBOX_UUID_TEXT_BYTES];
    ck_assert(ledger_inbox_key_split(k, len, &consumer, &key, text));
    size_t n = ledger_inbox_key_text(consumer, key, out);
    if (n == 0)
        memcpy(out, k, n = len);
    return n;
}

static int compare_keys(const void *a, const void *b)
{
    const uint8_t *x = a, *y = b; /* length byte first, then the key */
    int c = memcmp(x + 1, y + 1, x[0] < y[0] ? x[0] : y[0]);
    return c ? c : (int)x[0] - (int)y[0];
}

/* The inbox_time group entries with their keys as format 8 stored them
 * (sorted again, front-coded again). */
static void text_keys_in_inbox_time(store_txn *t)
{
    static uint8_t keys[256][1 + LEDGER_INBOX_KEY_BYTES_MAX], value[8192],
        entry_keys[64][LEDGER_INBOX_TIME_GROUP_KEY_BYTES];
    static uint8_t values[64][8192];
    static size_t value_lens[64];
    size_t entries = 0;
    store_scan s;
    ck_assert_int_eq(store_scan_begin(t, STORE_DB_INBOX_TIME, NULL, 0, false, &s), TALLY_ok);
    for (; store_scan_on(&s); store_scan_next(&s), entries++) {
        ledger_inbox_time_entry e;
        ck_assert_int_eq(ledger_inbox_time_decode(&s.key, &s.val, &e), TALLY_ok);
        ck_assert(e.group && entries < 64 && s.key.mv_size == LEDGER_INBOX_TIME_GROUP_KEY_BYTES);
        memcpy(entry_keys[entries], s.key.mv_data, s.key.mv_size);
        ledger_inbox_time_iter it;
        ledger_inbox_time_iter_init(&it, &e);
        size_t n = 0;
        while (ledger_inbox_time_next(&it)) {
            ck_assert_uint_lt(n, 256);
            keys[n][0] = (uint8_t)text_key(it.key, it.len, keys[n] + 1);
            n++;
        }
        qsort(keys, n, sizeof(keys[0]), compare_keys);
        size_t len = 0;
        for (size_t i = 0; i < n; i++)
            len += ledger_inbox_time_encode(i ? keys[i - 1] + 1 : NULL, i ? keys[i - 1][0] : 0,
                                            keys[i] + 1, keys[i][0], value + len);
        memcpy(values[entries], value, len);
        value_lens[entries] = len;
    }
    ck_assert_int_eq(store_scan_end(&s, TALLY_ok), TALLY_ok);
    for (size_t i = 0; i < entries; i++)
        ck_assert_int_eq(store_put(t, STORE_DB_INBOX_TIME, entry_keys[i],
                                   LEDGER_INBOX_TIME_GROUP_KEY_BYTES, values[i], value_lens[i], 0),
                         TALLY_ok);
}

/* The rows a scan of db would rewrite: keys and values copied. */
typedef struct rows {
    uint8_t keys[512][LEDGER_INBOX_KEY_BYTES_MAX], vals[512][128];
    size_t key_lens[512], val_lens[512], n;
} rows;

/* Rewrite the store in format 8's layouts and mark it 8. */
static void make_format_8(test_store *ts, rows *r)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    log_head head;
    ck_assert_int_eq(log_head_get(&t, &head), TALLY_ok);
    for (uint64_t seq = 1; seq <= head.seq; seq++) { /* events in format 2 */
        size_t len;
        uint8_t *ev = test_event_bytes(&t, seq, &len), key[8];
        log_seq_key(seq, key);
        ck_assert_int_eq(store_put(&t, STORE_DB_LOG, key, 8, ev, len, 0), TALLY_ok);
        free(ev);
    }
    const store_db dbs[3] = {STORE_DB_TRANSFER_INDEX, STORE_DB_HISTORY, STORE_DB_INBOX};
    for (int d = 0; d < 3; d++) {
        r->n = 0;
        store_scan s;
        ck_assert_int_eq(store_scan_begin(&t, dbs[d], NULL, 0, false, &s), TALLY_ok);
        for (; store_scan_on(&s); store_scan_next(&s)) {
            ck_assert_uint_lt(r->n, 512);
            memcpy(r->keys[r->n], s.key.mv_data, s.key.mv_size);
            r->key_lens[r->n] = s.key.mv_size;
            memcpy(r->vals[r->n], s.val.mv_data, s.val.mv_size);
            r->val_lens[r->n++] = s.val.mv_size;
        }
        ck_assert_int_eq(store_scan_end(&s, TALLY_ok), TALLY_ok);
        if (dbs[d] == STORE_DB_HISTORY)
            ck_assert_int_eq(store_clear(&t, STORE_DB_HISTORY), TALLY_ok);
        for (size_t i = 0; i < r->n; i++) {
            MDB_val k = {r->key_lens[i], r->keys[i]}, v = {r->val_lens[i], r->vals[i]};
            if (dbs[d] == STORE_DB_TRANSFER_INDEX) { /* the id as the value */
                tally_id128 id;
                ck_assert_int_eq(ledger_index_transfer_id(&t, &k, &v, &id), TALLY_ok);
                ck_assert_int_eq(store_put(&t, dbs[d], k.mv_data, k.mv_size, id.bytes, 16, 0),
                                 TALLY_ok);
            } else if (dbs[d] == STORE_DB_HISTORY) { /* one entry per seq */
                history_block b;
                const char *why = "";
                ck_assert_int_eq(ledger_history_block_decode(&k, &v, &b, &why), TALLY_ok);
                for (uint32_t j = 0; j < b.count; j++) {
                    uint8_t key[16];
                    ledger_history_key(b.account_id, b.seqs[j], key);
                    ck_assert_int_eq(store_put(&t, dbs[d], key, 16, "", 0, 0), TALLY_ok);
                }
            } else { /* fixed-width fields, under the key's text */
                ledger_inbox_record rec;
                uint8_t fixed[128], text[LEDGER_INBOX_KEY_BYTES_MAX];
                ck_assert_int_eq(ledger_inbox_decode(k.mv_data, k.mv_size, v.mv_data, v.mv_size,
                                                     &rec),
                                 TALLY_ok);
                size_t len = inbox_fixed(&rec, fixed);
                size_t n = text_key(k.mv_data, k.mv_size, text);
                if (n != k.mv_size)
                    ck_assert_int_eq(store_del(&t, dbs[d], k.mv_data, k.mv_size), TALLY_ok);
                ck_assert_int_eq(store_put(&t, dbs[d], text, n, fixed, len, 0), TALLY_ok);
            }
        }
    }
    text_keys_in_inbox_time(&t);
    uint8_t eight[4];
    put_u32_be(eight, 8);
    ck_assert_int_eq(store_put(&t, STORE_DB_META, "format_version", 14, eight, 4, 0), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
}

static int add_transfer(const ledger_transfer_record *r, void *ctx)
{
    uint64_t *ids = ctx;
    ids[++ids[0]] = get_u64_be(r->id.bytes + 8);
    return 0;
}

/* Every page of transfer_query by user_data_64 7 (limit 7): the ids in
 * ids[1..ids[0]]. */
static void query_all(test_store *ts, uint64_t ids[SEQS_MAX])
{
    ledger_query q = {.limit = 7, .user_data = {.user_data_64 = 7}};
    ids[0] = 0;
    for (int pages = 0;; pages++) {
        ck_assert_int_lt(pages, 100);
        store_txn t;
        ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
        ledger_query_page page;
        ck_assert_int_eq(ledger_transfer_query(&t, &q, add_transfer, ids, &page), TALLY_ok);
        store_txn_abort(&t);
        if (!page.has_next)
            return;
        q.has_cursor = true;
        memcpy(q.cursor, page.next, sizeof(q.cursor));
    }
}

/* What the store answers is what it answered before: the queries, the
 * history (plus the seqs of the new transfers new_tids), the replays. */
static void expect_answers(test_store *ts, const before *b, uint64_t transfers,
                           const uint64_t *new_tids, uint32_t new_n)
{
    uint64_t ids[SEQS_MAX];
    query_all(ts, ids);
    ck_assert_uint_eq(ids[0], transfers);
    for (uint64_t i = 0; i < transfers; i++)
        ck_assert_uint_eq(ids[1 + i], 100 + i);
    for (uint64_t a = 1; a <= ACCOUNTS; a++) {
        uint64_t seqs[SEQS_MAX];
        uint32_t n, want = b->history_n[a];
        history_of(ts, a, seqs, &n);
        for (uint32_t i = 0; i < new_n; i++)
            want += test_transfer(ts, new_tids[i]).debit_account_id == a ||
                    test_transfer(ts, new_tids[i]).credit_account_id == a;
        ck_assert_uint_eq(n, want);
        for (uint32_t i = 0; i < b->history_n[a]; i++)
            ck_assert_uint_eq(seqs[i], b->history[a][i]);
    }
    char key[40];
    for (uint64_t i = 0; i <= OLD_TRANSFERS; i++) {
        ledger_command c = transfer(i);
        if (i == OLD_TRANSFERS)
            c = transfer(3), c.u.transfer.amount = 2;
        key_of(i, key);
        ledger_outcome again = test_apply(ts, "up", i == OLD_TRANSFERS ? "other" : key, &c);
        const ledger_outcome *o = &b->outcomes[i];
        ck_assert(again.replayed);
        ck_assert_int_eq(again.code, o->code);
        ck_assert_uint_eq(again.first_seq, o->first_seq);
        ck_assert_uint_eq(again.event_count, o->event_count);
        ck_assert_uint_eq(again.original_seq, o->original_seq);
        ck_assert_int_eq(again.time_ms, o->time_ms);
    }
}

/* How many values of db are as format 8 wrote them (index: 16 bytes;
 * history: one seq; inbox: format 2 or 3; log: format 2) and how many
 * not. */
static void count_forms(test_store *ts, store_db db, uint64_t *old, uint64_t *now)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    store_scan s;
    ck_assert_int_eq(store_scan_begin(&t, db, NULL, 0, false, &s), TALLY_ok);
    *old = *now = 0;
    for (; store_scan_on(&s); store_scan_next(&s)) {
        const uint8_t *v = s.val.mv_data;
        bool is_old = db == STORE_DB_TRANSFER_INDEX ? s.val.mv_size == 16
                      : db == STORE_DB_HISTORY      ? s.val.mv_size == 0
                      : db == STORE_DB_LOG          ? v[0] == 0x9c
                                                    : v[0] == 2 || v[0] == 3;
        *old += is_old;
        *now += !is_old;
    }
    ck_assert_int_eq(store_scan_end(&s, TALLY_ok), TALLY_ok);
    store_txn_abort(&t);
}

static bool text_keys_marked(test_store *ts)
{
    store_txn t;
    bool is = false;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(ledger_inbox_text_keys_marked(&t, &is), TALLY_ok);
    store_txn_abort(&t);
    return is;
}

START_TEST(format_8_store_reads_and_upgrades)
{
    test_store ts;
    static before b;
    static rows r;
    fill(&ts, &b);
    make_format_8(&ts, &r);
    uint64_t old, now;
    count_forms(&ts, STORE_DB_TRANSFER_INDEX, &old, &now);
    ck_assert(old == 3 * OLD_TRANSFERS && now == 0);
    count_forms(&ts, STORE_DB_INBOX, &old, &now);
    ck_assert(old == ACCOUNTS + OLD_TRANSFERS + 1 && now == 0);
    count_forms(&ts, STORE_DB_LOG, &old, &now);
    uint64_t old_events = old;
    ck_assert(old_events > OLD_TRANSFERS && now == 0);
    store_close(ts.st); /* read only, as it is */
    store_options ro = {.path = ts.dir, .read_only = true};
    ck_assert_int_eq(store_open(&ro, &ts.st), TALLY_ok);
    test_assert_invariants(&ts);
    uint64_t ids[SEQS_MAX];
    query_all(&ts, ids);
    ck_assert_uint_eq(ids[0], OLD_TRANSFERS);
    test_store_reopen(&ts); /* the writer, with --upgrade */
    ck_assert_uint_eq(store_upgraded_from(ts.st), 8);
    ck_assert(text_keys_marked(&ts));
    test_assert_invariants(&ts);
    expect_answers(&ts, &b, OLD_TRANSFERS, NULL, 0);
    /* new commands: the new forms beside the old */
    uint64_t new_ids[NEW_TRANSFERS];
    char key[40];
    for (uint64_t i = OLD_TRANSFERS; i < OLD_TRANSFERS + NEW_TRANSFERS; i++) {
        ledger_command c = transfer(i);
        key_of(i, key);
        ck_assert_int_eq(test_apply(&ts, "up", key, &c).code, TALLY_ok);
        new_ids[i - OLD_TRANSFERS] = 100 + i;
        ts.now_ms++;
    }
    test_history_fold(&ts);
    count_forms(&ts, STORE_DB_TRANSFER_INDEX, &old, &now);
    ck_assert(old == 3 * OLD_TRANSFERS && now == 3 * NEW_TRANSFERS);
    count_forms(&ts, STORE_DB_INBOX, &old, &now);
    ck_assert(old == ACCOUNTS + OLD_TRANSFERS + 1 && now == NEW_TRANSFERS);
    count_forms(&ts, STORE_DB_HISTORY, &old, &now);
    ck_assert_uint_gt(old, 0);
    ck_assert_uint_gt(now, 0);
    count_forms(&ts, STORE_DB_LOG, &old, &now);
    ck_assert(old == old_events && now == NEW_TRANSFERS);
    expect_answers(&ts, &b, OLD_TRANSFERS + NEW_TRANSFERS, new_ids, NEW_TRANSFERS);
    /* inbox retention removes the records of before: the mark goes with
     * the last of them, and the keys are free */
    ck_assert(text_keys_marked(&ts));
    ts.now_ms += 8 * INT64_C(86400000);
    ledger_retention opt = {.inbox_window_ms = 7 * INT64_C(86400000), .batch = 1000};
    ledger_retention_work w;
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, false, &t), TALLY_ok);
    ck_assert_int_eq(ledger_retention_sweep(&t, ts.now_ms, &opt, &w), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(w.inbox_removed, ACCOUNTS + OLD_TRANSFERS + 1 + NEW_TRANSFERS);
    ck_assert(!text_keys_marked(&ts));
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), 0);
    test_finish(&ts);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("upgrade");
    TCase *tc = tcase_create("upgrade");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, format_8_store_reads_and_upgrades);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}

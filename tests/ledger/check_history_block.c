/*
 * check_history_block.c — tests of ledger/history_block.c: the blocks of
 * an account's seqs in "history" (store format 10).
 *
 * What must hold:
 *   - a block decodes to the seqs it was put with; an empty value is one
 *     seq (the key's), a 16-byte value one seq with its transfer id (the
 *     entries before December 2026); a block that would be 16 bytes long
 *     gets its 0 byte and still reads as a block;
 *   - a garbled block (unknown format, a gap of 0, a gap past seq 1, a
 *     truncated gap, more than HISTORY_BLOCK_SEQS_MAX seqs, no gap) is
 *     corrupt_record, with a reason;
 *   - appended seqs come back from ledger_history_block_seqs in order,
 *     both ways, from every cursor and with small limits, with the
 *     neighbouring accounts' blocks and one-seq entries of older stores
 *     around them, as a model says;
 *   - an insert lands in the block whose range holds it (split in two
 *     when full), below every block as a block of its own, and not twice;
 *     a delete of a block's last seq puts the block under its new last,
 *     of its only seq removes it; has finds exactly the seqs held.
 */
#include "tests/support/test_support.h"

#include "common/bytes.h"
#include "ledger/history_block.h"

#include <check.h>
#include <string.h>

#define ACCOUNT 7
#define MODEL_MAX 400

typedef struct model {
    uint64_t seqs[MODEL_MAX]; /* ACCOUNT's, ascending */
    uint32_t n;
} model;

static store_txn begin(test_store *ts)
{
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts->st, NULL, false, &t), TALLY_ok);
    return t;
}

static void put_raw(store_txn *t, uint64_t account, uint64_t seq, const void *val, size_t len)
{
    uint8_t key[16];
    put_u64_be(key, account);
    put_u64_be(key + 8, seq);
    ck_assert_int_eq(store_put(t, STORE_DB_HISTORY, key, 16, val, len, 0), TALLY_ok);
}

static int decode(uint64_t seq, const void *val, size_t len, history_block *b, const char **why)
{
    uint8_t key[16];
    put_u64_be(key, ACCOUNT);
    put_u64_be(key + 8, seq);
    MDB_val k = {16, key}, v = {len, (void *)val};
    *why = "";
    return ledger_history_block_decode(&k, &v, b, why);
}

/* Every page of the account's seqs, both ways, from every cursor, against
 * the model. */
static void expect_walks(store_txn *t, const model *m)
{
    for (uint32_t limit = 1; limit <= 5; limit += 4) {
        for (uint32_t c = 0; c <= m->n; c++) {
            uint64_t cursor = c == 0 ? 0 : m->seqs[c - 1], got[8];
            uint32_t n = 0;
            ck_assert_int_eq(ledger_history_block_seqs(t, ACCOUNT, false, cursor, got, limit, &n),
                             TALLY_ok);
            uint32_t want = m->n - c < limit ? m->n - c : limit;
            ck_assert_uint_eq(n, want);
            for (uint32_t i = 0; i < n; i++)
                ck_assert_uint_eq(got[i], m->seqs[c + i]);
            /* reversed: below the cursor (0: from the last) */
            uint64_t below = c == m->n ? 0 : m->seqs[c];
            uint32_t under = c == m->n ? m->n : c;
            n = 0;
            ck_assert_int_eq(ledger_history_block_seqs(t, ACCOUNT, true, below, got, limit, &n),
                             TALLY_ok);
            want = under < limit ? under : limit;
            ck_assert_uint_eq(n, want);
            for (uint32_t i = 0; i < n; i++)
                ck_assert_uint_eq(got[i], m->seqs[under - 1 - i]);
        }
    }
}

START_TEST(blocks_decode_and_refuse_garbage)
{
    history_block b;
    const char *why;
    ck_assert_int_eq(decode(40, "", 0, &b, &why), TALLY_ok);
    ck_assert(b.count == 1 && b.seqs[0] == 40 && b.transfer_id == NULL);
    uint8_t id[16];
    memset(id, 0xab, sizeof(id));
    ck_assert_int_eq(decode(40, id, 16, &b, &why), TALLY_ok);
    ck_assert(b.count == 1 && b.seqs[0] == 40 && b.transfer_id != NULL);
    /* 16 seqs one apart: the format byte and 15 gaps of one byte, 16
     * bytes, so the 0 byte follows */
    test_store ts;
    test_store_open(&ts);
    store_txn t = begin(&ts);
    uint64_t seqs[HISTORY_BLOCK_SEQS_MAX + 1];
    for (uint32_t i = 0; i < 16; i++)
        seqs[i] = 100 + i;
    ck_assert_int_eq(ledger_history_blocks_append(&t, ACCOUNT, seqs, 16), TALLY_ok);
    uint8_t key[16];
    put_u64_be(key, ACCOUNT);
    put_u64_be(key + 8, 115);
    MDB_val v;
    ck_assert_int_eq(store_get(&t, STORE_DB_HISTORY, key, 16, &v), TALLY_ok);
    ck_assert_uint_eq(v.mv_size, 17);
    ck_assert_uint_eq(((const uint8_t *)v.mv_data)[16], 0);
    ck_assert_int_eq(decode(115, v.mv_data, v.mv_size, &b, &why), TALLY_ok);
    ck_assert(b.count == 16 && b.seqs[0] == 100 && b.seqs[15] == 115 && !b.transfer_id);
    store_txn_abort(&t);
    test_store_close(&ts);
    const struct {
        uint8_t bytes[8];
        size_t len;
        const char *why;
    } bad[] = {
        {{9, 1}, 2, "unknown format"},
        {{HISTORY_BLOCK_FORMAT, 0}, 2, "a gap is garbled"},
        {{HISTORY_BLOCK_FORMAT, 40}, 2, "a gap is garbled"}, /* seq 0 */
        {{HISTORY_BLOCK_FORMAT, 0x81}, 2, "a gap is garbled"}, /* truncated */
        {{HISTORY_BLOCK_FORMAT}, 1, "a block without gaps"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ck_assert_int_eq(decode(40, bad[i].bytes, bad[i].len, &b, &why), TALLY_corrupt_record);
        ck_assert_str_eq(why, bad[i].why);
    }
    uint8_t many[1 + HISTORY_BLOCK_SEQS_MAX];
    many[0] = HISTORY_BLOCK_FORMAT;
    memset(many + 1, 1, HISTORY_BLOCK_SEQS_MAX); /* 65 seqs */
    ck_assert_int_eq(decode(1000, many, sizeof(many), &b, &why), TALLY_corrupt_record);
    ck_assert_str_eq(why, "too many seqs");
    ck_assert_int_eq(decode(1000, many, sizeof(many) - 1, &b, &why), TALLY_ok);
    ck_assert_uint_eq(b.count, HISTORY_BLOCK_SEQS_MAX);
}
END_TEST

START_TEST(appended_blocks_walk_both_ways)
{
    test_store ts;
    test_store_open(&ts);
    store_txn t = begin(&ts);
    model m = {.n = 0};
    /* older stores' one-seq entries first (empty, and with an id) */
    put_raw(&t, ACCOUNT, 3, "", 0);
    m.seqs[m.n++] = 3;
    uint8_t id[16] = {1};
    put_raw(&t, ACCOUNT, 9, id, 16);
    m.seqs[m.n++] = 9;
    /* neighbours on both sides */
    uint64_t other[3] = {5, 600, 70000};
    ck_assert_int_eq(ledger_history_blocks_append(&t, ACCOUNT - 1, other, 3), TALLY_ok);
    ck_assert_int_eq(ledger_history_blocks_append(&t, ACCOUNT + 1, other, 3), TALLY_ok);
    /* 150 seqs with gaps of 1 to 300 (one- and two-byte gaps) in folds of
     * 1, 16 and 133: blocks of 1, 16, 64, 64 and 5 */
    uint64_t seq = 10, seqs[150];
    for (uint32_t i = 0; i < 150; i++) {
        seq += 1 + (i * 37) % 300;
        seqs[i] = seq;
        m.seqs[m.n++] = seq;
    }
    ck_assert_int_eq(ledger_history_blocks_append(&t, ACCOUNT, seqs, 1), TALLY_ok);
    ck_assert_int_eq(ledger_history_blocks_append(&t, ACCOUNT, seqs + 1, 16), TALLY_ok);
    ck_assert_int_eq(ledger_history_blocks_append(&t, ACCOUNT, seqs + 17, 133), TALLY_ok);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY), 0); /* not committed yet */
    ck_assert_uint_eq(test_history_seqs(&ts, &t), 6 + m.n);
    expect_walks(&t, &m);
    for (uint32_t i = 0; i < m.n; i++)
        ck_assert_int_eq(ledger_history_block_has(&t, ACCOUNT, m.seqs[i]), TALLY_ok);
    ck_assert_int_eq(ledger_history_block_has(&t, ACCOUNT, m.seqs[20] + 1), TALLY_not_found);
    ck_assert_int_eq(ledger_history_block_has(&t, ACCOUNT, 1), TALLY_not_found);
    ck_assert_int_eq(ledger_history_block_has(&t, ACCOUNT, seq + 1), TALLY_not_found);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY), 2 + 2 + 5);
    test_store_close(&ts);
}
END_TEST

/* Insert into and delete from the model as from the store. */
static void model_insert(model *m, uint64_t seq)
{
    uint32_t i = 0;
    while (i < m->n && m->seqs[i] < seq)
        i++;
    if (i < m->n && m->seqs[i] == seq)
        return;
    memmove(m->seqs + i + 1, m->seqs + i, (m->n - i) * sizeof(m->seqs[0]));
    m->seqs[i] = seq;
    m->n++;
}

static void model_del(model *m, uint64_t seq)
{
    uint32_t i = 0;
    while (i < m->n && m->seqs[i] != seq)
        i++;
    ck_assert_uint_lt(i, m->n);
    memmove(m->seqs + i, m->seqs + i + 1, (m->n - i - 1) * sizeof(m->seqs[0]));
    m->n--;
}

START_TEST(inserts_and_deletes_keep_the_blocks_in_order)
{
    test_store ts;
    test_store_open(&ts);
    store_txn t = begin(&ts);
    model m = {.n = 0};
    uint64_t seqs[HISTORY_BLOCK_SEQS_MAX];
    for (uint32_t i = 0; i < HISTORY_BLOCK_SEQS_MAX; i++)
        seqs[i] = m.seqs[m.n++] = 1000 + 10 * i; /* one full block */
    ck_assert_int_eq(ledger_history_blocks_append(&t, ACCOUNT, seqs, HISTORY_BLOCK_SEQS_MAX),
                     TALLY_ok);
    ck_assert_uint_eq(test_count(&ts, STORE_DB_HISTORY), 0);
    /* into the full block: split in two; again (no change); below all */
    const uint64_t inserts[] = {1205, 1205, 1001, 500, 1635, 1636};
    for (size_t i = 0; i < sizeof(inserts) / sizeof(inserts[0]); i++) {
        ck_assert_int_eq(ledger_history_block_insert(&t, ACCOUNT, inserts[i]), TALLY_ok);
        model_insert(&m, inserts[i]);
        expect_walks(&t, &m);
    }
    ck_assert_uint_eq(test_history_seqs(&ts, &t), m.n);
    /* deletes: a block's last (re-keyed), an inner seq, a lone block */
    const uint64_t dels[] = {1630, 1310, 500, 1000};
    for (size_t i = 0; i < sizeof(dels) / sizeof(dels[0]); i++) {
        ck_assert_int_eq(ledger_history_block_del(&t, ACCOUNT, dels[i]), TALLY_ok);
        ck_assert_int_eq(ledger_history_block_del(&t, ACCOUNT, dels[i]), TALLY_not_found);
        ck_assert_int_eq(ledger_history_block_has(&t, ACCOUNT, dels[i]), TALLY_not_found);
        model_del(&m, dels[i]);
        expect_walks(&t, &m);
    }
    ck_assert_uint_eq(test_history_seqs(&ts, &t), m.n);
    for (uint32_t i = 0; i < m.n; i++)
        ck_assert_int_eq(ledger_history_block_has(&t, ACCOUNT, m.seqs[i]), TALLY_ok);
    ck_assert_int_eq(store_txn_commit(&t), TALLY_ok);
    test_store_close(&ts);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("history_block");
    TCase *tc = tcase_create("history_block");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, blocks_decode_and_refuse_garbage);
    tcase_add_test(tc, appended_blocks_walk_both_ways);
    tcase_add_test(tc, inserts_and_deletes_keep_the_blocks_in_order);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}

/*
 * check_webhook.c — tests of the webhook_receive command (ledger/webhook.c
 * and its inbox path in ledger/ledger.c): a delivery appends one
 * webhook.received event whose entity, causation and body row carry the
 * delivery byte for byte; the same (source, id, body) again replays
 * without an event, even signed at another time; the same id with another
 * body is idempotency_key_reused and leaves nothing; the invariant checker
 * (tally-recon's) folds past the event and flags one that does not hold
 * together; validation bounds.
 */
#include "tests/support/suite.h"
#include "tests/support/test_support.h"

#include "common/msgpack_safe.h"

#include <string.h>

static ledger_command delivery(const char *source, const char *id, const char *type,
                               int64_t signed_at_s, const char *body)
{
    ledger_command c = {.kind = LEDGER_WEBHOOK_RECEIVE};
    c.u.webhook = (ledger_webhook){tally_str_from(source), tally_str_from(id),
                                   type ? tally_str_from(type) : (tally_str){0}, signed_at_s,
                                   tally_str_from(body)};
    return c;
}

typedef struct seen {
    bool ok;
} seen;

/* The event at seq 1 is the delivery of START_TEST(stored_whole). */
static void check_stored(const log_event *ev, void *ctx)
{
    seen *s = ctx;
    ck_assert(tally_str_equal(ev->type, tally_str_from("webhook.received")));
    ck_assert_int_eq(ev->entity.kind, LOG_ENTITY_WEBHOOK);
    ck_assert(tally_str_equal(ev->entity.webhook_source, tally_str_from("stripe")));
    ck_assert(tally_str_equal(ev->entity.webhook_event_id, tally_str_from("evt_1")));
    ck_assert_uint_eq(ev->entity_version, 1);
    ck_assert(ev->has_causation);
    ck_assert(tally_str_equal(ev->consumer, tally_str_from("webhook:stripe")));
    ck_assert(tally_str_equal(ev->key, tally_str_from("evt_1")));
    const msgpack_object *row = log_event_part(ev, LOG_PART_WEBHOOK);
    ck_assert_ptr_nonnull(row);
    ck_assert_int_eq(row->type, MSGPACK_OBJECT_ARRAY);
    ck_assert_uint_eq(row->via.array.size, 5);
    const msgpack_object *f = row->via.array.ptr;
    tally_str text;
    int64_t at;
    const void *body;
    size_t body_len;
    ck_assert(msgpack_safe_get_str(&f[0], &text) && tally_str_equal(text, tally_str_from("stripe")));
    ck_assert(msgpack_safe_get_str(&f[1], &text) && tally_str_equal(text, tally_str_from("evt_1")));
    ck_assert(msgpack_safe_get_str(&f[2], &text) && tally_str_equal(text, tally_str_from("invoice.paid")));
    ck_assert(msgpack_safe_get_i64(&f[3], &at) && at == 1700000000);
    ck_assert(msgpack_safe_get_bin(&f[4], &body, &body_len));
    ck_assert_uint_eq(body_len, 5);
    ck_assert(memcmp(body, "{\"a\":", 5) == 0);
    s->ok = true;
}

START_TEST(test_stored_whole)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command c = delivery("stripe", "evt_1", "invoice.paid", 1700000000, "{\"a\":");
    ledger_outcome o = test_apply(&ts, "webhook:stripe", "evt_1", &c);
    ck_assert_int_eq(o.code, TALLY_ok);
    ck_assert_uint_eq(o.first_seq, 1);
    ck_assert_uint_eq(o.event_count, 1);
    seen s = {false};
    test_with_event(&ts, 1, check_stored, &s);
    ck_assert(s.ok);
    test_finish(&ts);
}
END_TEST

START_TEST(test_retry_replays_other_body_is_refused)
{
    test_store ts;
    test_store_open(&ts);
    ledger_command first = delivery("std", "msg_1", NULL, 1700000000, "{\"n\":1}");
    ck_assert_int_eq(test_apply(&ts, "webhook:std", "msg_1", &first).code, TALLY_ok);
    /* The provider's retry: the same body, signed later. */
    ledger_command retry = delivery("std", "msg_1", NULL, 1700000060, "{\"n\":1}");
    ledger_outcome o = test_apply(&ts, "webhook:std", "msg_1", &retry);
    ck_assert_int_eq(o.code, TALLY_ok);
    ck_assert(o.replayed);
    ck_assert_uint_eq(o.first_seq, 1);
    ledger_command other = delivery("std", "msg_1", NULL, 1700000000, "{\"n\":2}");
    ck_assert_int_eq(test_apply(&ts, "webhook:std", "msg_1", &other).code,
                     TALLY_idempotency_key_reused);
    ck_assert_uint_eq(test_head(&ts).seq, 1); /* neither appended anything */
    ck_assert_uint_eq(test_count(&ts, STORE_DB_INBOX), 1);
    test_finish(&ts);
}
END_TEST

typedef struct findings {
    unsigned rebuild;
    bool named_webhook;
} findings;

static void on_finding(const char *check, const char *entity, const char *detail, void *ctx)
{
    (void)entity;
    findings *f = ctx;
    if (strcmp(check, "rebuild") == 0) {
        f->rebuild++;
        f->named_webhook |= strstr(detail, "webhook event") != NULL;
    }
}

START_TEST(test_invariants_flag_a_webhook_event_of_another_key)
{
    test_store ts;
    test_store_open(&ts);
    /* A delivery recorded under a key that is not its (source, id): the
     * intake never does this; the checker must notice. */
    ledger_command c = delivery("stripe", "evt_1", NULL, 0, "{}");
    ck_assert_int_eq(test_apply(&ts, "webhook:other", "evt_1", &c).code, TALLY_ok);
    findings f = {0, false};
    ledger_invariant_stats stats;
    store_txn t;
    ck_assert_int_eq(store_txn_begin(ts.st, NULL, true, &t), TALLY_ok);
    ck_assert_int_eq(ledger_invariants_check(&t, on_finding, &f, &stats), TALLY_ok);
    store_txn_abort(&t);
    ck_assert_uint_eq(f.rebuild, 1);
    ck_assert(f.named_webhook);
    test_store_close(&ts);
}
END_TEST

START_TEST(test_bounds)
{
    test_store ts;
    test_store_open(&ts);
    char long_id[TALLY_WEBHOOK_EVENT_ID_BYTES_MAX + 2];
    memset(long_id, 'e', sizeof(long_id) - 1);
    long_id[sizeof(long_id) - 1] = '\0';
    ledger_command c = delivery("stripe", long_id, NULL, 0, "{}");
    ck_assert_int_eq(test_apply(&ts, "webhook:stripe", "k1", &c).code, TALLY_value_out_of_range);
    static char body[TALLY_WEBHOOK_BODY_BYTES_MAX + 2];
    memset(body, 'b', sizeof(body) - 1);
    c = delivery("stripe", "evt_big", NULL, 0, body);
    ck_assert_int_eq(test_apply(&ts, "webhook:stripe", "k2", &c).code, TALLY_value_out_of_range);
    body[TALLY_WEBHOOK_BODY_BYTES_MAX] = '\0'; /* the largest body fits an event */
    char type[TALLY_WEBHOOK_EVENT_TYPE_BYTES_MAX + 1], id[TALLY_WEBHOOK_EVENT_ID_BYTES_MAX + 1],
        source[TALLY_WEBHOOK_SOURCE_BYTES_MAX + 1];
    memset(type, 't', sizeof(type) - 1), type[sizeof(type) - 1] = '\0';
    memset(id, 'i', sizeof(id) - 1), id[sizeof(id) - 1] = '\0';
    memset(source, 's', sizeof(source) - 1), source[sizeof(source) - 1] = '\0';
    char consumer[TALLY_CONSUMER_BYTES_MAX + 1];
    snprintf(consumer, sizeof(consumer), "webhook:%s", source);
    c = delivery(source, id, type, TALLY_TIME_MS_MAX / 1000, body);
    ck_assert_int_eq(test_apply(&ts, consumer, id, &c).code, TALLY_ok);
    test_finish(&ts);
}
END_TEST

#define TIMEOUT_S 60

static Suite *webhook_suite(void)
{
    const test_row tests[] = {
        {"event", test_stored_whole, TIMEOUT_S},
        {"inbox", test_retry_replays_other_body_is_refused, TIMEOUT_S},
        {"invariants", test_invariants_flag_a_webhook_event_of_another_key, TIMEOUT_S},
        {"bounds", test_bounds, TIMEOUT_S},
    };
    return test_suite_of_rows("webhook", TEST_ROWS(tests));
}

int main(void) { return test_run_suite_both_modes(webhook_suite()); }

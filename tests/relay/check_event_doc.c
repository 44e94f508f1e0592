/*
 * check_event_doc.c — the JSON document tally-relay sends for an event
 * (relay/event_doc.c, docs/RELAY.md, "The event document") for the kinds
 * whose body part is a row, not an object: a webhook delivery carries the
 * provider's payload (its JSON under "payload", other bytes as base64
 * under "body_base64") and a dead letter its fields, each named as in
 * docs/EVENTS.md. The accounts, transfers and entitlements of the
 * document (common/event_doc.c, the one definition tallyd's HTTP face
 * gives too) are what the CLI's --json prints for the same objects
 * (clients/json/json.c), and integers beyond 2^53 are strings (the JSON
 * API's value rule). The events are encoded by the log's own codec
 * (common/log_event.c) and read back by libtally's, as the relay gets them.
 * And the filter of the subjects a subject template makes, which the
 * JetStream sink reads its stream back with.
 */
#include "config.h"

#include "clients/inbox/tally_inbox.h"
#include "clients/json/json.h"
#include "clients/libtally/events.h"
#include "common/log_event.h"
#include "common/msgpack_safe.h"
#include "relay/relay.h"
#include "tests/support/test_support.h"

#include <check.h>
#include <jansson.h>
#include <string.h>

typedef struct row {
    const char *first;      /* source, or subscriber */
    const char *second;     /* event id; NULL for a dead letter */
    const char *type;       /* event type or NULL (nil) */
    const void *bytes;      /* the webhook body, or the dead letter's error */
    size_t bytes_len;
} row;

static int pack_webhook(msgpack_packer *pk, const void *ctx)
{
    const row *r = ctx;
    return msgpack_pack_array(pk, 1) || msgpack_pack_array(pk, 5) ||
           msgpack_safe_pack_cstr(pk, r->first) || msgpack_safe_pack_cstr(pk, r->second) ||
           (r->type ? msgpack_safe_pack_cstr(pk, r->type) : msgpack_pack_nil(pk)) ||
           msgpack_pack_int64(pk, 1796286600) || msgpack_safe_pack_bin(pk, r->bytes, r->bytes_len);
}

static int pack_dead_letter(msgpack_packer *pk, const void *ctx)
{
    const row *r = ctx;
    return msgpack_pack_array(pk, 1) || msgpack_pack_array(pk, 5) ||
           msgpack_safe_pack_cstr(pk, r->first) || msgpack_pack_uint64(pk, 7) ||
           msgpack_pack_uint32(pk, 3) || msgpack_pack_int64(pk, 1796286600250) ||
           msgpack_safe_pack_str(pk, (tally_str){r->bytes, r->bytes_len});
}

static int pack_endpoint(msgpack_packer *pk, const void *ctx)
{
    const row *r = ctx;
    return msgpack_pack_array(pk, 1) || msgpack_pack_array(pk, 5) ||
           msgpack_safe_pack_cstr(pk, r->first) || msgpack_safe_pack_cstr(pk, r->second) ||
           msgpack_safe_pack_cstr(pk, r->type) || msgpack_pack_int64(pk, 0) ||
           msgpack_pack_int64(pk, 0);
}

/* The relay's document of one event made from draft, parsed. */
static json_t *document_of(log_event_draft *draft)
{
    static uint8_t buf[TALLY_EVENT_BYTES_MAX];
    uint8_t prev[LOG_HASH_BYTES] = {0}, hash[LOG_HASH_BYTES];
    tally_id128 id = {{0x01, 0x8f, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 1}};
    size_t len = 0;
    draft->entity_version = 1;
    draft->time_ms = 1796286600250;
    ck_assert_int_eq(log_event_encode(draft, 1, &id, prev, buf, sizeof(buf), &len, hash), TALLY_ok);
    tally_event e;
    ck_assert(client_event_from_bytes(buf, len, &e));
    char *text = NULL;
    size_t text_len = 0;
    ck_assert_int_eq(relay_event_doc(&e, &text, &text_len), TALLY_ok);
    tally_events_release(&e, 1);
    json_error_t err;
    json_t *doc = json_loadb(text, text_len, 0, &err);
    ck_assert_msg(doc != NULL, "not JSON: %s", err.text);
    free(text);
    return doc;
}

static const char *str_at(const json_t *doc, const char *part, const char *field)
{
    const json_t *v = json_object_get(json_object_get(json_object_get(doc, "data"), part), field);
    ck_assert_msg(json_is_string(v), "data.%s.%s is not a string", part, field);
    return json_string_value(v);
}

static json_int_t int_at(const json_t *doc, const char *part, const char *field)
{
    const json_t *v = json_object_get(json_object_get(json_object_get(doc, "data"), part), field);
    ck_assert_msg(json_is_integer(v), "data.%s.%s is not an integer", part, field);
    return json_integer_value(v);
}

static log_event_draft webhook_draft(const row *r)
{
    log_event_draft d = {.type = LOG_EVENT_WEBHOOK_RECEIVED, .pack_body = pack_webhook, .body_ctx = r};
    d.entity = (log_entity){.kind = LOG_ENTITY_WEBHOOK,
                            .webhook_source = tally_str_from(r->first),
                            .webhook_event_id = tally_str_from(r->second)};
    d.consumer = tally_str_from("webhook:stripe");
    d.key = tally_str_from(r->second);
    return d;
}

START_TEST(a_webhook_carries_its_payload)
{
    const char body[] = "{\"id\":\"evt_1\",\"type\":\"invoice.paid\",\"data\":{\"amount\":1200}}";
    row r = {"stripe", "evt_1", "invoice.paid", body, sizeof(body) - 1};
    log_event_draft d = webhook_draft(&r);
    json_t *doc = document_of(&d);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "type")), "webhook.received");
    ck_assert_str_eq(str_at(doc, "webhook", "source"), "stripe");
    ck_assert_str_eq(str_at(doc, "webhook", "event_id"), "evt_1");
    ck_assert_str_eq(str_at(doc, "webhook", "event_type"), "invoice.paid");
    ck_assert_int_eq(int_at(doc, "webhook", "signed_at_s"), 1796286600);
    const json_t *payload = json_object_get(json_object_get(json_object_get(doc, "data"), "webhook"),
                                            "payload");
    ck_assert_str_eq(json_string_value(json_object_get(payload, "type")), "invoice.paid");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(payload, "data"), "amount")),
                     1200);
    json_decref(doc);
}
END_TEST

START_TEST(a_body_that_is_not_json_is_base64)
{
    const unsigned char body[] = {0x00, 0xff, 'x'};
    row r = {"github", "d-1", NULL, body, sizeof(body)};
    log_event_draft d = webhook_draft(&r);
    json_t *doc = document_of(&d);
    ck_assert_str_eq(str_at(doc, "webhook", "body_base64"), "AP94");
    const json_t *w = json_object_get(json_object_get(doc, "data"), "webhook");
    ck_assert(json_is_null(json_object_get(w, "event_type")));
    ck_assert_ptr_null(json_object_get(w, "payload"));
    json_decref(doc);
}
END_TEST

/* An endpoint event (docs/EVENTS.md): its entity {kind, name} and the
 * endpoint part's fields by name. */
START_TEST(an_endpoint_event_carries_its_fields)
{
    row r = {"billing", "disabled", "failing for 5d (disable_after): billing: HTTP 503", NULL, 0};
    log_event_draft d = {.type = LOG_EVENT_ENDPOINT_DISABLED, .pack_body = pack_endpoint,
                         .body_ctx = &r};
    d.entity = (log_entity){.kind = LOG_ENTITY_ENDPOINT, .endpoint = tally_str_from("billing")};
    d.consumer = tally_str_from("relay");
    d.key = tally_str_from("relay-disable:billing:1");
    json_t *doc = document_of(&d);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "type")), "endpoint.disabled");
    const json_t *entity = json_object_get(doc, "entity");
    ck_assert_str_eq(json_string_value(json_object_get(entity, "kind")), "endpoint");
    ck_assert_str_eq(json_string_value(json_object_get(entity, "name")), "billing");
    ck_assert_str_eq(str_at(doc, "endpoint", "name"), "billing");
    ck_assert_str_eq(str_at(doc, "endpoint", "state"), "disabled");
    ck_assert_str_eq(str_at(doc, "endpoint", "reason"), r.type);
    ck_assert_int_eq(int_at(doc, "endpoint", "previous_secret_until_ms"), 0);
    ck_assert_int_eq(int_at(doc, "endpoint", "recover_since_ms"), 0);
    json_decref(doc);
}
END_TEST

START_TEST(a_dead_letter_carries_its_fields)
{
    const char error[] = "handler failed";
    row r = {"mailer", NULL, NULL, error, sizeof(error) - 1};
    log_event_draft d = {.type = LOG_EVENT_DEAD_LETTER_EXPIRED, .pack_body = pack_dead_letter,
                         .body_ctx = &r};
    d.entity = (log_entity){.kind = LOG_ENTITY_DEAD_LETTER, .subscriber = tally_str_from("mailer"),
                            .letter_seq = 7};
    json_t *doc = document_of(&d);
    ck_assert_str_eq(str_at(doc, "dead_letter", "subscriber"), "mailer");
    ck_assert_int_eq(int_at(doc, "dead_letter", "seq"), 7);
    ck_assert_int_eq(int_at(doc, "dead_letter", "attempts"), 3);
    ck_assert_int_eq(int_at(doc, "dead_letter", "parked_ms"), 1796286600250);
    ck_assert_str_eq(str_at(doc, "dead_letter", "error"), "handler failed");
    json_decref(doc);
}
END_TEST

/* An account row (docs/EVENTS.md): id, ledger, code, flags, the four
 * balances, version, created_seq, and the appended created_ms and user
 * data. */
static int pack_account_row(msgpack_packer *pk, uint64_t id, uint16_t flags, int64_t credits)
{
    static const uint8_t user_data_128[16] = {0xab, [15] = 0xcd};
    return msgpack_pack_array(pk, 14) || msgpack_pack_uint64(pk, id) ||
           msgpack_pack_uint32(pk, 1) || msgpack_pack_uint16(pk, 10) ||
           msgpack_pack_uint16(pk, flags) || msgpack_pack_int64(pk, 0) ||
           msgpack_pack_int64(pk, credits) || msgpack_pack_int64(pk, 0) ||
           msgpack_pack_int64(pk, 0) || msgpack_pack_uint64(pk, 2) ||
           msgpack_pack_uint64(pk, 1) || msgpack_pack_int64(pk, 1796286500000) ||
           msgpack_safe_pack_bin(pk, user_data_128, 16) || msgpack_pack_uint64(pk, 64) ||
           msgpack_pack_uint32(pk, 32);
}

static const uint8_t transfer_id[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a};
static const uint8_t reversed_id[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x09};

/* A pending transfer (a hold) of 500 from account 1 (closed by it) to a
 * big id, with user data, a reversal of another (as the row allows) and
 * 7 of it reversed. */
static int pack_transfer(msgpack_packer *pk, const void *ctx)
{
    (void)ctx;
    static const uint8_t user_data_128[16] = {[0] = 0x12, [15] = 0x34};
    return msgpack_pack_array(pk, 3) || msgpack_pack_array(pk, 20) ||
           msgpack_safe_pack_bin(pk, transfer_id, 16) || msgpack_pack_uint64(pk, 1) ||
           msgpack_pack_uint64(pk, UINT64_C(9007199254740993)) || msgpack_pack_int64(pk, 500) ||
           msgpack_pack_uint32(pk, 1) || msgpack_pack_uint16(pk, 1) ||
           msgpack_pack_uint16(pk, 1) || msgpack_pack_uint64(pk, 2) ||
           msgpack_pack_uint32(pk, 60) || msgpack_pack_int64(pk, 1796286660250) ||
           msgpack_pack_int64(pk, 0) || msgpack_pack_uint64(pk, 1) ||
           msgpack_pack_uint64(pk, 3) || msgpack_pack_uint64(pk, 0) ||
           msgpack_pack_int64(pk, 1796286600250) ||
           msgpack_safe_pack_bin(pk, user_data_128, 16) || msgpack_pack_uint64(pk, 640) ||
           msgpack_pack_uint32(pk, 320) || msgpack_safe_pack_bin(pk, reversed_id, 16) ||
           msgpack_pack_int64(pk, 7) || pack_account_row(pk, 1, 1 | 4, 0) ||
           pack_account_row(pk, UINT64_C(9007199254740993), 0, 0);
}

/* An entitlement with an end, granted by a transfer, without a source order. */
static int pack_entitlement(msgpack_packer *pk, const void *ctx)
{
    (void)ctx;
    return msgpack_pack_array(pk, 1) || msgpack_pack_array(pk, 9) ||
           msgpack_safe_pack_cstr(pk, "user-7") || msgpack_safe_pack_cstr(pk, "pro") ||
           msgpack_pack_uint64(pk, 1) || msgpack_pack_int64(pk, 1798878600000) ||
           msgpack_pack_uint64(pk, 1) || msgpack_pack_nil(pk) ||
           msgpack_pack_int64(pk, 1796286600250) || msgpack_pack_int64(pk, 1796286600250) ||
           msgpack_safe_pack_bin(pk, transfer_id, 16);
}

/* The event, as document_of makes it, for the CLI's decoders: its body
 * from its raw bytes (a tally_event carries a body only in callbacks), in
 * up, which the caller destroys. */
static void event_of(log_event_draft *draft, tally_event *e, msgpack_unpacked *up)
{
    static uint8_t buf[TALLY_EVENT_BYTES_MAX];
    uint8_t prev[LOG_HASH_BYTES] = {0}, hash[LOG_HASH_BYTES];
    tally_id128 id = {{0x01, 0x8f, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, 1}};
    size_t len = 0;
    ck_assert_int_eq(log_event_encode(draft, 1, &id, prev, buf, sizeof(buf), &len, hash), TALLY_ok);
    ck_assert(client_event_from_bytes(buf, len, e));
    log_event le;
    msgpack_unpacked_init(up);
    ck_assert_int_eq(log_event_decode(e->raw, e->raw_len, up, &le), TALLY_ok);
    e->body = le.body;
}

/* data.<name> equals what the CLI prints for the same object (want, taken). */
static void part_is(const json_t *doc, const char *name, json_t *want)
{
    const json_t *got = json_object_get(json_object_get(doc, "data"), name);
    char *g = json_dumps(got, JSON_COMPACT), *w = json_dumps(want, JSON_COMPACT);
    ck_assert_msg(json_equal(got, want), "data.%s: %s, the CLI prints %s", name, g, w);
    free(g);
    free(w);
    json_decref(want);
}

START_TEST(a_transfer_is_what_the_cli_prints)
{
    log_event_draft d = {.type = LOG_EVENT_TRANSFER_CREATED, .pack_body = pack_transfer};
    d.entity = (log_entity){.kind = LOG_ENTITY_TRANSFER};
    memcpy(d.entity.transfer_id.bytes, transfer_id, 16);
    d.consumer = tally_str_from("shop");
    d.key = tally_str_from("hold-1");
    json_t *doc = document_of(&d);
    tally_event e;
    msgpack_unpacked up;
    event_of(&d, &e, &up);
    tally_transfer_info t;
    tally_account debit, credit;
    ck_assert_int_eq(tally_transfer_from_msgpack(tally_event_part(&e, TALLY_PART_TRANSFER), &t),
                     TALLY_ok);
    ck_assert_int_eq(
        tally_account_from_msgpack(tally_event_part(&e, TALLY_PART_DEBIT_ACCOUNT), &debit),
        TALLY_ok);
    ck_assert_int_eq(
        tally_account_from_msgpack(tally_event_part(&e, TALLY_PART_CREDIT_ACCOUNT), &credit),
        TALLY_ok);
    msgpack_unpacked_destroy(&up);
    tally_events_release(&e, 1);
    /* beyond 2^53 a string, by the value rule (the CLI's JSON keeps it a number) */
    json_t *want = transfer_json(&t);
    json_object_set_new(want, "credit_account_id", json_string("9007199254740993"));
    part_is(doc, "transfer", want);
    part_is(doc, "debit_account", account_json(&debit));
    want = account_json(&credit);
    json_object_set_new(want, "id", json_string("9007199254740993"));
    part_is(doc, "credit_account", want);
    const json_t *data = json_object_get(doc, "data");
    ck_assert(json_is_true(json_object_get(json_object_get(data, "transfer"), "pending")));
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(data, "transfer"),
                                                        "reversed_amount")),
                     7);
    ck_assert(json_is_true(json_object_get(json_object_get(data, "debit_account"), "closed")));
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(data, "debit_account"),
                                                        "user_data_64")),
                     64);
    ck_assert_str_eq(json_string_value(json_object_get(doc, "key")), "hold-1");
    json_decref(doc);
}
END_TEST

START_TEST(an_entitlement_is_what_the_cli_prints)
{
    log_event_draft d = {.type = LOG_EVENT_ENTITLEMENT_GRANTED, .pack_body = pack_entitlement};
    d.entity = (log_entity){.kind = LOG_ENTITY_ENTITLEMENT, .subject = tally_str_from("user-7"),
                            .feature = tally_str_from("pro")};
    json_t *doc = document_of(&d);
    tally_event e;
    msgpack_unpacked up;
    event_of(&d, &e, &up);
    tally_entitlement x;
    ck_assert_int_eq(
        tally_entitlement_from_msgpack(tally_event_part(&e, TALLY_PART_ENTITLEMENT), &x),
        TALLY_ok);
    msgpack_unpacked_destroy(&up);
    tally_events_release(&e, 1);
    part_is(doc, "entitlement", entitlement_json(&x));
    const json_t *entity = json_object_get(doc, "entity");
    ck_assert_str_eq(json_string_value(json_object_get(entity, "subject")), "user-7");
    ck_assert(json_is_null(json_object_get(doc, "consumer"))); /* a sweep's: no causation */
    json_decref(doc);
}
END_TEST

/* The filter the JetStream sink reads its subjects back with (docs/RELAY.md,
 * "Exactly once in the stream"), and whether a stream subject holds it. */
START_TEST(a_subject_template_has_a_filter_within_the_stream)
{
    static const struct {
        const char *template_text, *filter;
    } filters[] = {
        {"tally.events.{type}", "tally.events.>"},
        {"tally.{entity_kind}.{type}", "tally.>"},
        {"tally.ev-{type}.v1", "tally.>"},
        {"{type}", ">"},
        {"tally.events", "tally.events"},
    };
    char out[64];
    for (size_t i = 0; i < sizeof(filters) / sizeof(filters[0]); i++) {
        ck_assert(relay_subject_filter(filters[i].template_text, out, sizeof(out)));
        ck_assert_str_eq(out, filters[i].filter);
    }
    ck_assert(!relay_subject_filter("tally.events.{type}", out, 8)); /* does not fit */
    static const struct {
        const char *filter, *subject;
        bool within;
    } within[] = {
        {"tally.events.>", "tally.events.>", true},
        {"tally.events.>", "tally.>", true},
        {"tally.events.>", ">", true},
        {"tally.>", "tally.events.>", false},
        {"tally.events.>", "tally.*", false},
        {"tally.events", "tally.*", true},
        {"tally.events.x", "tally.*.x", true},
        {"tally.*.x", "tally.events.x", false},
        {"tally.events", "tally.events.>", false},
        {"other.>", "tally.>", false},
    };
    for (size_t i = 0; i < sizeof(within) / sizeof(within[0]); i++)
        ck_assert_msg(relay_subject_within(within[i].filter, within[i].subject) ==
                          within[i].within,
                      "%s within %s", within[i].filter, within[i].subject);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("event_doc");
    TCase *tc = tcase_create("event_doc");
    tcase_add_test(tc, a_webhook_carries_its_payload);
    tcase_add_test(tc, a_body_that_is_not_json_is_base64);
    tcase_add_test(tc, a_dead_letter_carries_its_fields);
    tcase_add_test(tc, an_endpoint_event_carries_its_fields);
    tcase_add_test(tc, a_transfer_is_what_the_cli_prints);
    tcase_add_test(tc, an_entitlement_is_what_the_cli_prints);
    tcase_add_test(tc, a_subject_template_has_a_filter_within_the_stream);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}

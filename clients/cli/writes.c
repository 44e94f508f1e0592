/*
 * writes.c — the writes of `tally` (account open, transfer, post, void,
 * grant, extend, revoke): the idempotency key of each, and its outcome.
 */
#include "config.h"

#include "clients/cli/tally_cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ---- write results ---- */

/* The key of a write: --key, else a new UUIDv7. */
static int key_prepare(cli *c)
{
    if (c->v[SLOT_KEY].set) {
        snprintf(c->key, sizeof(c->key), "%s", c->v[SLOT_KEY].text);
        c->key_given = true;
        return CLI_EXIT_OK;
    }
    tally_uuid key;
    if (tally_uuid_v7(&key) != TALLY_ok) {
        fputs("tally: cannot generate a key (no randomness); pass --key\n", stderr);
        return CLI_EXIT_REJECTED;
    }
    char text[37];
    tally_uuid_format(&key, text);
    snprintf(c->key, sizeof(c->key), "%s", text);
    return CLI_EXIT_OK;
}

static void write_human(const cli *c, int code, const tally_result *r, const tally_uuid *tid)
{
    printf("%-12s %s\n", "code", tally_strerror(code));
    printf("%-12s %s\n", "replayed", r->replayed ? "yes" : "no");
    if (r->seq)
        printf("%-12s %" PRIu64 "\n", "seq", r->seq);
    else
        printf("%-12s -\n", "seq");
    printf("%-12s %" PRIu32 "\n", "events", r->events);
    if (r->original_seq)
        printf("%-12s %" PRIu64 "\n", "original_seq", r->original_seq);
    uint64_t cluster_seq = tally_client_cluster_seq(c->client);
    if (cluster_seq) /* cluster mode: the stream position it was applied at */
        printf("%-12s %" PRIu64 "\n", "cluster_seq", cluster_seq);
    printf("%-12s %s\n", "key", c->key);
    if (tid) {
        char hex[33];
        tid_format(tid, hex);
        printf("%-12s %s\n", "transfer_id", hex);
    }
}

/* Print the outcome of a write (tid: the transfer it is about, or NULL) and
 * return the exit code. */
static int write_report(cli *c, const char *what, int rc, const tally_result *r,
                        const tally_uuid *tid)
{
    int code = rc != TALLY_ok ? rc : r->code;
    if (!c->key_given && !c->json)
        fprintf(stderr, "tally: key %s (repeat with --key %s to retry)\n", c->key, c->key);
    if (c->json) {
        json_t *o = json_pack("{s:s, s:b, s:o?, s:I, s:o}", "code", tally_strerror(code),
                              "replayed", (int)r->replayed, "seq",
                              r->seq ? json_u64(r->seq) : NULL, "events", (json_int_t)r->events,
                              "key", json_text(c->key));
        if (o && r->original_seq)
            json_object_set_new(o, "original_seq", json_u64(r->original_seq));
        if (o && tally_client_cluster_seq(c->client))
            json_object_set_new(o, "cluster_seq", json_u64(tally_client_cluster_seq(c->client)));
        if (o && tid)
            json_object_set_new(o, "transfer_id", json_tid(tid));
        json_emit(o);
    } else if (!is_transport_fault(code) && code != TALLY_invalid_argument) {
        write_human(c, code, r, tid);
    }
    if (code != TALLY_ok && !c->json)
        explain_failure(c, what, code, true);
    return exit_code_of(code);
}

/* ---- accounts ---- */

/* --user-data-128/64/32 (0 when not given). */
static tally_user_data user_data_of(const cli *c)
{
    tally_user_data u = {.user_data_64 = value_or(c, SLOT_USER_DATA_64, 0),
                         .user_data_32 = (uint32_t)value_or(c, SLOT_USER_DATA_32, 0)};
    if (c->v[SLOT_USER_DATA_128].set)
        u.user_data_128 = c->v[SLOT_USER_DATA_128].id;
    return u;
}

int run_account_open(cli *c)
{
    tally_account_open_args a = {.id = c->v[SLOT_ACCOUNT].u,
                                 .ledger = (uint32_t)value_or(c, SLOT_LEDGER, 1),
                                 .code = (uint16_t)value_or(c, SLOT_CODE, 1)};
    if (c->v[SLOT_DEBITS_LIMITED].set)
        a.flags |= TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS;
    if (c->v[SLOT_CREDITS_LIMITED].set)
        a.flags |= TALLY_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS;
    a.user_data = user_data_of(c);
    if (c->v[SLOT_IMPORTED_AT].set) {
        a.flags |= TALLY_ACCOUNT_IMPORTED;
        a.timestamp_ms = c->v[SLOT_IMPORTED_AT].i;
    }
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_account_open(c->client, c->key, &a, &r);
    return write_report(c, "account open", rc, &r, NULL);
}

/* ---- transfers and holds ---- */

/* The id and key of a transfer (the rule of `tally --help`): --id or the
 * id derived from the key; --key, or "transfer-<id>" with --id, or new. */
static int transfer_identify(cli *c, tally_uuid *id)
{
    if (c->v[SLOT_ID].set && !c->v[SLOT_KEY].set) {
        char hex[33];
        *id = c->v[SLOT_ID].id;
        tid_format(id, hex);
        snprintf(c->key, sizeof(c->key), "transfer-%s", hex);
        return CLI_EXIT_OK;
    }
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (c->v[SLOT_ID].set)
        *id = c->v[SLOT_ID].id;
    else
        tally_uuid_from_key(c->consumer, c->key, id);
    return CLI_EXIT_OK;
}

int run_transfer(cli *c)
{
    if (c->v[SLOT_TIMEOUT_S].set && !c->v[SLOT_PENDING].set)
        return usage_error(c, "--timeout-s is for holds: add --pending");
    tally_transfer_args t = {.debit_account_id = c->v[SLOT_DEBIT].u,
                             .credit_account_id = c->v[SLOT_CREDIT].u,
                             .amount = c->v[SLOT_AMOUNT].i,
                             .ledger = (uint32_t)value_or(c, SLOT_LEDGER, 1),
                             .code = (uint16_t)value_or(c, SLOT_CODE, 1)};
    if (c->v[SLOT_PENDING].set) {
        t.flags = TALLY_TRANSFER_PENDING;
        t.timeout_s = (uint32_t)value_or(c, SLOT_TIMEOUT_S, 0);
    }
    t.user_data = user_data_of(c);
    static const struct {
        cli_slot slot;
        uint16_t flag;
    } flag_options[] = {{SLOT_BALANCING_DEBIT, TALLY_TRANSFER_BALANCING_DEBIT},
                        {SLOT_BALANCING_CREDIT, TALLY_TRANSFER_BALANCING_CREDIT},
                        {SLOT_CLOSING_DEBIT, TALLY_TRANSFER_CLOSING_DEBIT},
                        {SLOT_CLOSING_CREDIT, TALLY_TRANSFER_CLOSING_CREDIT}};
    for (size_t i = 0; i < sizeof(flag_options) / sizeof(flag_options[0]); i++)
        if (c->v[flag_options[i].slot].set)
            t.flags |= flag_options[i].flag;
    if (c->v[SLOT_IMPORTED_AT].set) {
        t.flags |= TALLY_TRANSFER_IMPORTED;
        t.timestamp_ms = c->v[SLOT_IMPORTED_AT].i;
    }
    int rc = transfer_identify(c, &t.id);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_transfer(c->client, c->key, &t, &r);
    return write_report(c, "transfer", rc, &r, &t.id);
}

int run_post(cli *c)
{
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    int64_t amount = c->v[SLOT_AMOUNT].set ? c->v[SLOT_AMOUNT].i : 0; /* 0: all of it */
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_post(c->client, c->key, &c->v[SLOT_TID].id, amount, &r);
    return write_report(c, "post", rc, &r, &c->v[SLOT_TID].id);
}

int run_reverse(cli *c)
{
    tally_reverse_args a = {.reverses = c->v[SLOT_TID].id,
                            .amount = c->v[SLOT_AMOUNT].set ? c->v[SLOT_AMOUNT].i : 0,
                            .code = (uint16_t)value_or(c, SLOT_CODE, 0)};
    a.user_data = user_data_of(c);
    int rc = transfer_identify(c, &a.id);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_reverse(c->client, c->key, &a, &r);
    return write_report(c, "reverse", rc, &r, &a.id);
}

int run_void(cli *c)
{
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_void(c->client, c->key, &c->v[SLOT_TID].id, &r);
    return write_report(c, "void", rc, &r, &c->v[SLOT_TID].id);
}

/* ---- entitlements ---- */

static int entitlement_prepare(cli *c, tally_entitlement_args *e)
{
    if (c->v[SLOT_UNTIL].set && c->v[SLOT_FOR].set)
        return usage_error(c, "--until and --for are mutually exclusive");
    memset(e, 0, sizeof(*e));
    e->subject = c->v[SLOT_SUBJECT].text;
    e->feature = c->v[SLOT_FEATURE].text;
    e->valid_until_ms = c->v[SLOT_UNTIL].set ? c->v[SLOT_UNTIL].i : 0;
    e->duration_ms = c->v[SLOT_FOR].set ? c->v[SLOT_FOR].i : 0;
    e->has_source_order = c->v[SLOT_SOURCE_ORDER].set;
    e->source_order = c->v[SLOT_SOURCE_ORDER].u;
    return key_prepare(c);
}

typedef int (*entitlement_write_fn)(tally_client *, const char *, const tally_entitlement_args *,
                                    tally_result *);

static int entitlement_write(cli *c, const char *what, entitlement_write_fn fn)
{
    tally_entitlement_args e;
    int rc = entitlement_prepare(c, &e);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = fn(c->client, c->key, &e, &r);
    return write_report(c, what, rc, &r, NULL);
}

int run_grant(cli *c) { return entitlement_write(c, "grant", tally_grant); }

int run_extend(cli *c)
{
    if (!c->v[SLOT_UNTIL].set && !c->v[SLOT_FOR].set)
        return usage_error(c, "missing --until RFC3339 (or --for DURATION)");
    return entitlement_write(c, "extend", tally_extend);
}

int run_revoke(cli *c) { return entitlement_write(c, "revoke", tally_revoke); }

/* ---- tally-relay's endpoints ---- */

int run_endpoint_disable(cli *c)
{
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_endpoint_disable(c->client, c->key, c->v[SLOT_ENDPOINT].text,
                                c->v[SLOT_REASON].set ? c->v[SLOT_REASON].text : NULL, &r);
    return write_report(c, "endpoint disable", rc, &r, NULL);
}

int run_endpoint_enable(cli *c)
{
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_endpoint_enable(c->client, c->key, c->v[SLOT_ENDPOINT].text, &r);
    return write_report(c, "endpoint enable", rc, &r, NULL);
}

/* One line on stdin into secret: false when there is none, or more. */
static bool secret_read(char secret[TALLY_ENDPOINT_SECRET_TEXT_BYTES_MAX + 2])
{
    size_t n = fread(secret, 1, TALLY_ENDPOINT_SECRET_TEXT_BYTES_MAX + 1, stdin);
    while (n > 0 && (secret[n - 1] == '\n' || secret[n - 1] == '\r'))
        n--;
    secret[n] = '\0';
    return n > 0 && n <= TALLY_ENDPOINT_SECRET_TEXT_BYTES_MAX && !memchr(secret, '\n', n);
}

/* The settings endpoint create and update share, from the command line. */
static tally_endpoint_args endpoint_args_of(const cli *c)
{
    const cli_value *v = c->v;
    tally_endpoint_args a = {.endpoint = v[SLOT_ENDPOINT].text};
    a.url = v[SLOT_ENDPOINT_URL].set ? v[SLOT_ENDPOINT_URL].text : NULL;
    a.types = v[SLOT_TYPES].set ? v[SLOT_TYPES].text : NULL;
    a.retry_schedule = v[SLOT_RETRY_SCHEDULE].set ? v[SLOT_RETRY_SCHEDULE].text : NULL;
    a.set_connect_timeout = v[SLOT_CONNECT_TIMEOUT_MS].set;
    a.connect_timeout_ms = (uint32_t)v[SLOT_CONNECT_TIMEOUT_MS].u;
    a.set_timeout = v[SLOT_REQUEST_TIMEOUT_MS].set;
    a.timeout_ms = (uint32_t)v[SLOT_REQUEST_TIMEOUT_MS].u;
    return a;
}

int run_endpoint_create(cli *c)
{
    char secret[TALLY_ENDPOINT_SECRET_TEXT_BYTES_MAX + 2];
    if (!secret_read(secret))
        return usage_error(c, "expected the endpoint's secret on stdin: one line, whsec_<base64>");
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_endpoint_args a = endpoint_args_of(c);
    a.secret = secret;
    a.backfill = c->v[SLOT_BACKFILL].set ? c->v[SLOT_BACKFILL].text : NULL;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_endpoint_create(c->client, c->key, &a, &r);
    memset(secret, 0, sizeof(secret));
    return write_report(c, "endpoint create", rc, &r, NULL);
}

int run_endpoint_update(cli *c)
{
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_endpoint_args a = endpoint_args_of(c);
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_endpoint_update(c->client, c->key, &a, &r);
    return write_report(c, "endpoint update", rc, &r, NULL);
}

int run_endpoint_delete(cli *c)
{
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_endpoint_delete(c->client, c->key, c->v[SLOT_ENDPOINT].text, &r);
    return write_report(c, "endpoint delete", rc, &r, NULL);
}

int run_endpoint_rotate_secret(cli *c)
{
    char secret[TALLY_ENDPOINT_SECRET_TEXT_BYTES_MAX + 2];
    if (!secret_read(secret))
        return usage_error(c, "expected the new secret on stdin: one line, whsec_<base64>");
    int64_t overlap_ms = 86400000;
    const char *overlap = c->v[SLOT_FOR].set ? c->v[SLOT_FOR].text : "24h";
    if (strcmp(overlap, "0") != 0 &&
        (!parse_duration(overlap, &overlap_ms) || overlap_ms / 1000 > TALLY_ENDPOINT_OVERLAP_S_MAX))
        return usage_error(c, "--overlap: 0, or a duration such as 24h, at most 30d");
    if (strcmp(overlap, "0") == 0)
        overlap_ms = 0;
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_endpoint_rotate_secret(c->client, c->key, c->v[SLOT_ENDPOINT].text, secret,
                                      (uint32_t)(overlap_ms / 1000), &r);
    memset(secret, 0, sizeof(secret));
    return write_report(c, "endpoint rotate-secret", rc, &r, NULL);
}

int run_endpoint_recover(cli *c)
{
    if (!c->v[SLOT_FROM_TIME].set)
        return usage_error(c, "missing --since RFC3339");
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_endpoint_recover(c->client, c->key, c->v[SLOT_ENDPOINT].text,
                                c->v[SLOT_FROM_TIME].i, &r);
    return write_report(c, "endpoint recover", rc, &r, NULL);
}

/*
 * reads.c — the reads of `tally`: an account, its history and the list of
 * accounts, a transfer, entitlements, the log, stats, and backup.
 */
#include "config.h"

#include "clients/cli/tally_cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- accounts ---- */

static const char *flags_text(uint16_t flags)
{
    bool debits = flags & TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS;
    bool credits = flags & TALLY_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS;
    return debits && credits ? "both"
           : debits          ? "debits<=credits"
           : credits         ? "credits<=debits"
                             : "-";
}

static const char *const account_titles[] = {"ID",             "LEDGER",         "CODE",
                                             "FLAGS",          "DEBITS_POSTED",  "CREDITS_POSTED",
                                             "DEBITS_PENDING", "CREDITS_PENDING", "VERSION"};

/* One account as a row of a table of account_titles. */
static void account_row(cli_table *t, const tally_account *a)
{
    table_add(t,
              "%" PRIu64 SEP "%" PRIu32 SEP "%u" SEP "%s" SEP "%" PRId64 SEP "%" PRId64 SEP
              "%" PRId64 SEP "%" PRId64 SEP "%" PRIu64,
              a->id, a->ledger, (unsigned)a->code, flags_text(a->flags), a->debits_posted,
              a->credits_posted, a->debits_pending, a->credits_pending, a->version);
}

int run_account_get(cli *c)
{
    tally_account a;
    memset(&a, 0, sizeof(a));
    int rc = tally_account_get(c->client, c->v[SLOT_ACCOUNT].u, &a);
    if (rc != TALLY_ok) {
        char what[48];
        snprintf(what, sizeof(what), "account %" PRIu64, c->v[SLOT_ACCOUNT].u);
        return read_failure(c, what, rc);
    }
    if (c->json) {
        json_emit(account_json(&a));
        return CLI_EXIT_OK;
    }
    cli_table t;
    table_init(&t, account_titles, 9);
    account_row(&t, &a);
    table_print_free(&t);
    return CLI_EXIT_OK;
}

const cli_listing_kind account_listing = {account_titles, 9,
                                                 TALLY_ACCOUNT_LIST_ENTRIES_MAX,
                                                 sizeof(tally_account)};

static int accounts_read(cli *c, uint64_t after, uint32_t limit, void *page, size_t *count,
                         uint64_t *next)
{
    return tally_account_list(c->client, after, limit, page, limit, count, next);
}

void accounts_output(const cli *c, cli_table *t, const void *page, size_t count)
{
    const tally_account *accounts = page;
    for (size_t i = 0; i < count; i++) {
        if (c->json)
            json_emit(account_json(&accounts[i]));
        else
            account_row(t, &accounts[i]);
    }
}

/* account list: pages of accounts in id order, until --limit of them are
 * shown or none follows (as dlq list reads dead letters). */
int run_account_list(cli *c)
{
    if (account_list_filtered(c))
        return run_account_query(c);
    cli_listing l;
    listing_begin(c, &l, &account_listing);
    uint64_t next = listing_by_cursor(c, &l, value_or(c, SLOT_AFTER, 0), accounts_read,
                                      accounts_output);
    if (l.rc != TALLY_ok)
        return read_failure(c, "accounts", l.rc);
    if (!c->json && l.remaining == 0 && next != 0)
        fprintf(stderr, "tally: more: tally account list --after %" PRIu64 "\n", next);
    return CLI_EXIT_OK;
}

static json_t *history_json(const tally_history_entry *e)
{
    return json_pack("{s:o, s:s, s:o, s:I, s:o, s:o}", "seq", json_u64(e->seq), "type", e->type,
                     "time", json_time(e->time_ms), "time_ms", (json_int_t)e->time_ms, "transfer",
                     transfer_json(&e->transfer), "account", account_json(&e->account));
}

static void history_table(const tally_history_entry *entries, size_t count)
{
    static const char *const titles[] = {
        "SEQ",    "TIME",  "TYPE",          "TRANSFER",       "DEBIT",          "CREDIT",
        "AMOUNT", "STATE", "DEBITS_POSTED", "CREDITS_POSTED", "DEBITS_PENDING", "CREDITS_PENDING"};
    cli_table t;
    table_init(&t, titles, 12);
    for (size_t i = 0; i < count; i++) {
        const tally_history_entry *e = &entries[i];
        char when[40], hex[33];
        time_text(e->time_ms, when);
        tid_format(&e->transfer.id, hex);
        table_add(&t,
                  "%" PRIu64 SEP "%s" SEP "%s" SEP "%s" SEP "%" PRIu64 SEP "%" PRIu64 SEP
                  "%" PRId64 SEP "%s" SEP "%" PRId64 SEP "%" PRId64 SEP "%" PRId64 SEP "%" PRId64,
                  e->seq, when, e->type, hex, e->transfer.debit_account_id,
                  e->transfer.credit_account_id, e->transfer.amount, e->transfer.state,
                  e->account.debits_posted, e->account.credits_posted, e->account.debits_pending,
                  e->account.credits_pending);
    }
    table_print_free(&t);
}

int run_account_history(cli *c)
{
    uint64_t id = c->v[SLOT_ACCOUNT].u;
    uint32_t limit = (uint32_t)value_or(c, SLOT_LIMIT, TALLY_HISTORY_ENTRIES_DEFAULT);
    bool reverse = c->v[SLOT_REVERSE].set;
    tally_history_entry *entries = calloc(limit, sizeof(*entries));
    if (!entries)
        cli_out_of_memory();
    size_t count = 0;
    uint64_t next = 0;
    int rc = tally_account_history(c->client, id, value_or(c, SLOT_AFTER, 0), limit, reverse,
                                   entries, limit, &count, &next);
    if (rc != TALLY_ok) {
        free(entries);
        char what[48];
        snprintf(what, sizeof(what), "history of account %" PRIu64, id);
        return read_failure(c, what, rc);
    }
    count = count < limit ? count : limit;
    if (c->json) {
        for (size_t i = 0; i < count; i++)
            json_emit(history_json(&entries[i]));
    } else {
        history_table(entries, count);
        if (next)
            fprintf(stderr,
                    "tally: more: tally account history %" PRIu64 " --after %" PRIu64 "%s\n", id,
                    next, reverse ? " --reverse" : "");
    }
    free(entries);
    return CLI_EXIT_OK;
}

/* ---- transfers ---- */

const char *const transfer_titles[12] = {"ID",        "DEBIT",   "CREDIT",  "AMOUNT",
                                         "LEDGER",    "CODE",    "STATE",   "POSTED_AMOUNT",
                                         "TIMEOUT_S", "EXPIRES", "CREATED", "VERSION"};

void transfer_row(cli_table *t, const tally_transfer_info *x)
{
    char hex[33], expires[40], created[40];
    tid_format(&x->id, hex);
    time_text(x->expires_at_ms, expires);
    time_text(x->created_ms, created);
    table_add(t,
              "%s" SEP "%" PRIu64 SEP "%" PRIu64 SEP "%" PRId64 SEP "%" PRIu32 SEP "%u" SEP
              "%s" SEP "%" PRId64 SEP "%" PRIu32 SEP "%s" SEP "%s" SEP "%" PRIu64,
              hex, x->debit_account_id, x->credit_account_id, x->amount, x->ledger,
              (unsigned)x->code, x->state, x->posted_amount, x->timeout_s, expires, created,
              x->version);
}

int run_transfer_get(cli *c)
{
    tally_transfer_info x;
    memset(&x, 0, sizeof(x));
    char hex[33];
    tid_format(&c->v[SLOT_TID].id, hex);
    int rc = tally_transfer_get(c->client, &c->v[SLOT_TID].id, &x);
    if (rc != TALLY_ok) {
        char what[48];
        snprintf(what, sizeof(what), "transfer %s", hex);
        return read_failure(c, what, rc);
    }
    if (c->json) {
        json_emit(transfer_json(&x));
        return CLI_EXIT_OK;
    }
    cli_table t;
    table_init(&t, transfer_titles, 12);
    transfer_row(&t, &x);
    table_print_free(&t);
    return CLI_EXIT_OK;
}

/* ---- entitlements ---- */

static void entitlements_print(const cli *c, const tally_entitlement *list, size_t count)
{
    static const char *const titles[] = {"FEATURE",      "STATE",   "VALID_UNTIL", "VERSION",
                                         "SOURCE_ORDER", "GRANTED", "UPDATED"};
    if (c->json) {
        json_t *array = json_array();
        for (size_t i = 0; array && i < count; i++)
            if (json_array_append_new(array, entitlement_json(&list[i])) != 0)
                cli_out_of_memory();
        json_emit(array);
        return;
    }
    cli_table t;
    table_init(&t, titles, 7);
    for (size_t i = 0; i < count; i++) {
        const tally_entitlement *e = &list[i];
        char until[40], granted[40], updated[40], order[24] = "-";
        if (e->lifetime)
            snprintf(until, sizeof(until), "lifetime");
        else
            time_format(e->valid_until_ms, until);
        time_text(e->granted_ms, granted);
        time_text(e->updated_ms, updated);
        if (e->has_source_order)
            snprintf(order, sizeof(order), "%" PRIu64, e->source_order);
        table_add(&t, "%s" SEP "%s" SEP "%s" SEP "%" PRIu64 SEP "%s" SEP "%s" SEP "%s", e->feature,
                  e->state, until, e->version, order, granted, updated);
    }
    table_print_free(&t);
}

int run_entitlements(cli *c)
{
    size_t capacity = CLI_ENTITLEMENTS_FIRST, count = 0;
    tally_entitlement *list = NULL;
    int rc;
    for (;;) {
        tally_entitlement *bigger = realloc(list, capacity * sizeof(*list));
        if (!bigger)
            cli_out_of_memory();
        list = bigger;
        count = 0;
        rc = tally_entitlement_list(c->client, c->v[SLOT_SUBJECT].text, list, capacity, &count);
        if (rc != TALLY_ok || count < capacity || capacity >= CLI_ENTITLEMENTS_MAX)
            break;
        /* The list may have been cut at capacity: ask again with room for more. */
        capacity = count > capacity * 2 ? count : capacity * 2;
        capacity = capacity < CLI_ENTITLEMENTS_MAX ? capacity : CLI_ENTITLEMENTS_MAX;
    }
    if (rc == TALLY_ok)
        entitlements_print(c, list, count < capacity ? count : capacity);
    free(list);
    if (rc != TALLY_ok) {
        char what[160];
        snprintf(what, sizeof(what), "entitlements of %s", c->v[SLOT_SUBJECT].text);
        return read_failure(c, what, rc);
    }
    return CLI_EXIT_OK;
}

/* ---- the log ---- */

static void log_page_output(const cli *c, cli_table *t, const tally_event *events, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const tally_event *e = &events[i];
        if (c->json) {
            json_emit(event_json(e));
            continue;
        }
        char when[40];
        time_text(e->time_ms, when);
        table_add(t, "%" PRIu64 SEP "%s" SEP "%s" SEP "%s" SEP "%" PRIu64 SEP "%s" SEP "%s", e->seq,
                  when, e->type, e->entity_kind, e->entity_version,
                  e->consumer[0] ? e->consumer : "-", e->key[0] ? e->key : "-");
    }
}

static const char *const log_titles[] = {"SEQ",     "TIME",     "TYPE", "ENTITY",
                                         "VERSION", "CONSUMER", "KEY"};
static const cli_listing_kind log_listing = {log_titles, 7, TALLY_LOG_READ_EVENTS_MAX,
                                             sizeof(tally_event)};

int run_log(cli *c)
{
    cli_listing l;
    tally_event *events = listing_begin(c, &l, &log_listing);
    uint64_t from = value_or(c, SLOT_FROM, 1), head = 0;
    from = from ? from : 1;
    for (uint32_t page; (page = listing_next(&l)) > 0;) {
        size_t count = 0;
        l.rc = tally_log_read(c->client, from, page, 0, events, page, &count, &head);
        if (l.rc != TALLY_ok)
            break;
        count = count < page ? count : page;
        log_page_output(c, &l.table, events, count);
        if (count > 0)
            from = events[count - 1].seq + 1;
        tally_events_release(events, count);
        if (count == 0)
            break;
        listing_took(&l, count);
    }
    listing_end(c, &l, true);
    if (l.rc != TALLY_ok)
        return read_failure(c, "log", l.rc);
    if (!c->json)
        fprintf(stderr, "tally: head %" PRIu64 "\n", head);
    return CLI_EXIT_OK;
}

/* ---- stats and backup ---- */

/* stats --json: "subscribers" becomes the array of their metrics. */
static int stats_subscribers_add(const cli *c, json_t *o, uint64_t count)
{
    static tally_subscriber_info list[TALLY_SUBSCRIBERS_MAX];
    size_t n = 0;
    int rc = count ? tally_stats_subscribers(c->client, list, TALLY_SUBSCRIBERS_MAX, &n)
                   : TALLY_ok;
    json_t *array = json_array();
    for (size_t k = 0; rc == TALLY_ok && array && k < n; k++)
        if (json_array_append_new(array, subscriber_json(&list[k])) != 0)
            cli_out_of_memory();
    if (!array || json_object_set_new(o, "subscribers", array) != 0)
        cli_out_of_memory();
    return rc;
}

int run_stats(cli *c)
{
    static const char *const titles[] = {"NAME", "VALUE"};
    tally_stats s;
    memset(&s, 0, sizeof(s));
    int rc = tally_stats_get(c->client, &s);
    if (rc != TALLY_ok)
        return read_failure(c, "stats", rc);
    const struct { const char *name; uint64_t value; } rows[] = {
        {"head_seq", s.head_seq},         {"first_seq", s.first_seq},
        {"accounts", s.accounts},         {"transfers", s.transfers},
        {"entitlements", s.entitlements}, {"inbox", s.inbox},
        {"events", s.events},             {"map_used_bytes", s.map_used_bytes},
        {"map_size_bytes", s.map_size_bytes}, {"map_max_bytes", s.map_max_bytes},
        {"inbox_oldest_age_s", s.inbox_oldest_age_s},
        {"log_floor", s.log_floor}, {"subscribers", s.subscribers}};
    size_t n = sizeof(rows) / sizeof(rows[0]); /* JSON: the last row becomes a list */
    json_t *o = c->json ? json_object() : NULL;
    cli_table t;
    table_init(&t, titles, 2);
    for (size_t i = 0; i < n; i++) {
        if (o && i + 1 < n && json_object_set_new(o, rows[i].name, json_u64(rows[i].value)) != 0)
            cli_out_of_memory();
        if (!o)
            table_add(&t, "%s" SEP "%" PRIu64, rows[i].name, rows[i].value);
    }
    if (o) /* --json: "subscribers" is the list of their metrics, as stats reports them */
        rc = stats_subscribers_add(c, o, s.subscribers);
    if (rc != TALLY_ok) {
        json_decref(o);
        return read_failure(c, "stats", rc);
    }
    if (o)
        json_emit(o);
    else
        table_print_free(&t);
    return CLI_EXIT_OK;
}

int run_backup(cli *c)
{
    const char *dest = c->v[SLOT_NAME].text;
    if (dest[0] != '/') {
        fprintf(stderr, "tally backup: DEST must be an absolute path on tallyd's machine\n");
        return CLI_EXIT_USAGE;
    }
    uint64_t bytes = 0;
    backup_progress *bp = backup_progress_start(c, dest);
    int rc = tally_backup(c->client, dest, &bytes);
    backup_progress_stop(bp);
    if (rc != TALLY_ok)
        return read_failure(c, "backup", rc);
    if (c->json)
        json_emit(json_pack("{s:s, s:s, s:o}", "code", "ok", "path", dest, "bytes",
                            json_u64(bytes)));
    else
        printf("backup written to %s (%" PRIu64 " bytes); check it with: tally-recon --data %s\n",
               dest, bytes, dest);
    return CLI_EXIT_OK;
}

/* A node's agreement at its last checkpoint: "diverged", "-" before any,
 * else "A/N" (the nodes whose digest is this node's, of those heard). */
static const char *agreement_of(const tally_cluster_status *st)
{
    static _Thread_local char text[48];
    if (st->diverged)
        return "diverged";
    if (st->checkpoint_position == 0)
        return "-";
    snprintf(text, sizeof(text), "%" PRIu64 "/%" PRIu64, st->checkpoint_agreeing,
             st->checkpoint_nodes);
    return text;
}

/* Each node of a --url list: its own client, its status; a line (or a
 * JSON object) per node, with its URL, and its code when it did not
 * answer. Exit 0 when every node answered, else the worst exit code. */
static int cluster_status_of_list(cli *c)
{
    static const char *const titles[] = {"URL",        "NODE",      "POSITION", "STREAM_LAST_SEQ",
                                         "LAG",        "CHECKPOINT", "AGREEMENT"};
    char list[TALLY_CLIENT_URL_LIST_BYTES_MAX + 1];
    snprintf(list, sizeof(list), "%s", c->url);
    cli_table t;
    table_init(&t, titles, 7);
    int worst = CLI_EXIT_OK;
    for (char *save = NULL, *url = strtok_r(list, ",", &save); url;
         url = strtok_r(NULL, ",", &save)) {
        tally_client_options o = c->options;
        o.url = url;
        tally_client *one = NULL;
        tally_cluster_status st;
        int rc = tally_client_open(&o, &one);
        if (rc == TALLY_ok)
            rc = tally_cluster_status_get(one, &st);
        tally_client_close(one);
        if (rc != TALLY_ok && exit_code_of(rc) > worst)
            worst = exit_code_of(rc);
        if (c->json && rc != TALLY_ok)
            json_emit(json_pack("{s:s, s:s}", "url", url, "code", tally_strerror(rc)));
        else if (c->json)
            json_emit(json_pack("{s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:b}", "url", url,
                                "node", st.node, "stream", st.stream, "position",
                                json_u64(st.position), "stream_last_seq",
                                json_u64(st.stream_last_seq), "lag_messages",
                                json_u64(st.lag_messages), "checkpoint_position",
                                json_u64(st.checkpoint_position), "checkpoint_agreeing",
                                json_u64(st.checkpoint_agreeing), "checkpoint_nodes",
                                json_u64(st.checkpoint_nodes), "diverged", st.diverged));
        else if (rc != TALLY_ok)
            table_add(&t, "%s" SEP "%s" SEP "-" SEP "-" SEP "-" SEP "-" SEP "-", url,
                      tally_strerror(rc));
        else
            table_add(&t,
                      "%s" SEP "%s" SEP "%" PRIu64 SEP "%" PRIu64 SEP "%" PRIu64 SEP "%" PRIu64
                      SEP "%s",
                      url, st.node, st.position, st.stream_last_seq, st.lag_messages,
                      st.checkpoint_position, agreement_of(&st));
    }
    if (!c->json)
        table_print_free(&t);
    return worst;
}

int run_cluster_status(cli *c)
{
    if (strchr(c->url, ','))
        return cluster_status_of_list(c);
    tally_cluster_status st;
    int rc = tally_cluster_status_get(c->client, &st);
    if (rc != TALLY_ok)
        return read_failure(c, "cluster status", rc);
    if (c->json) {
        json_emit(json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:b}", "node", st.node,
                            "stream", st.stream, "position", json_u64(st.position),
                            "stream_last_seq", json_u64(st.stream_last_seq), "lag_messages",
                            json_u64(st.lag_messages), "checkpoint_position",
                            json_u64(st.checkpoint_position), "checkpoint_agreeing",
                            json_u64(st.checkpoint_agreeing), "checkpoint_nodes",
                            json_u64(st.checkpoint_nodes), "diverged", st.diverged));
        return CLI_EXIT_OK;
    }
    printf("%-16s %s\n%-16s %s\n%-16s %" PRIu64 "\n%-16s %" PRIu64 "\n%-16s %" PRIu64 "\n", "node",
           st.node, "stream", st.stream, "position", st.position, "stream_last_seq",
           st.stream_last_seq, "lag_messages", st.lag_messages);
    printf("%-16s %" PRIu64 "\n%-16s %s\n", "checkpoint", st.checkpoint_position, "agreement",
           agreement_of(&st));
    return CLI_EXIT_OK;
}

int run_health(cli *c)
{
    static const char *const titles[] = {"CHECK", "CLASS", "SUBSCRIBER", "OK", "VALUE",
                                         "THRESHOLD", "REASON"};
    static tally_health_check checks[16 + 4 * TALLY_SUBSCRIBERS_MAX]; /* 5 of the store now */
    static tally_check_class classes[sizeof(checks) / sizeof(checks[0])];
    size_t n = 0;
    bool ready = false, healthy = false;
    int rc = tally_health_classes(c->client, &ready, &healthy, checks, classes,
                                  sizeof(checks) / sizeof(checks[0]), &n);
    if (rc != TALLY_ok)
        return read_failure(c, "health", rc);
    json_t *list = c->json ? json_array() : NULL;
    cli_table t;
    table_init(&t, titles, 7);
    for (size_t i = 0; i < n; i++) {
        const tally_health_check *k = &checks[i];
        const char *cls = classes[i] == TALLY_CHECK_ALERT ? "alert" : "readiness";
        if (list && json_array_append_new(
                        list, json_pack("{s:s, s:s, s:s?, s:b, s:o, s:o, s:s?}", "check", k->check,
                                        "class", cls, "subscriber",
                                        k->subscriber[0] ? k->subscriber : NULL, "ok", (int)k->ok,
                                        "value", json_u64(k->value), "threshold",
                                        json_u64(k->threshold), "reason",
                                        k->reason[0] ? k->reason : NULL)) != 0)
            cli_out_of_memory();
        if (!list)
            table_add(&t, "%s" SEP "%s" SEP "%s" SEP "%s" SEP "%" PRIu64 SEP "%" PRIu64 SEP "%s",
                      k->check, cls, k->subscriber[0] ? k->subscriber : "-", k->ok ? "yes" : "NO",
                      k->value, k->threshold, k->reason[0] ? k->reason : "-");
    }
    if (list)
        json_emit(json_pack("{s:b, s:b, s:o}", "ready", (int)ready, "healthy", (int)healthy,
                            "checks", list));
    else {
        table_print_free(&t);
        printf("%s\n", !ready    ? "NOT READY: a readiness check fails"
                       : healthy ? "healthy"
                                 : "ALERT: a check fails (ready)");
    }
    return !ready ? CLI_EXIT_NOT_READY : healthy ? CLI_EXIT_OK : CLI_EXIT_REJECTED;
}

/* ---- tally-relay's endpoints ---- */

int run_endpoint_show(cli *c)
{
    tally_endpoint_info e;
    int rc = tally_endpoint_get(c->client, c->v[SLOT_ENDPOINT].text, &e);
    if (rc != TALLY_ok) {
        char what[96];
        snprintf(what, sizeof(what), "endpoint %s", c->v[SLOT_ENDPOINT].text);
        return read_failure(c, what, rc);
    }
    char since[40], recover[40];
    time_text(e.changed_ms, since);
    time_text(e.recover_since_ms, recover);
    if (c->json) {
        json_emit(json_pack("{s:s, s:s, s:o, s:o, s:s, s:o}", "endpoint", e.endpoint, "state",
                            e.disabled ? "disabled" : "enabled", "version", json_u64(e.version),
                            "changed", e.changed_ms ? json_string(since) : json_null(),
                            "reason", e.reason, "recover_since",
                            e.recover_since_ms ? json_string(recover) : json_null()));
        return CLI_EXIT_OK;
    }
    printf("endpoint %s: %s", e.endpoint, e.disabled ? "disabled" : "enabled");
    if (e.version)
        printf(" since %s (version %" PRIu64 ")", since, e.version);
    printf("%s%s", e.reason[0] ? ": " : "", e.reason);
    if (e.recover_since_ms)
        printf("; a recover from %s is pending", recover);
    printf("\n");
    return CLI_EXIT_OK;
}

int run_endpoint_list(cli *c)
{
    tally_endpoint_definition *list = calloc(TALLY_CLIENT_ENDPOINTS_DEFINED_MAX, sizeof(*list));
    if (list == NULL)
        cli_out_of_memory();
    size_t count = 0;
    int rc = tally_endpoint_list(c->client, list, TALLY_CLIENT_ENDPOINTS_DEFINED_MAX, &count);
    if (rc != TALLY_ok) {
        free(list);
        return read_failure(c, "endpoints", rc);
    }
    static const char *const titles[] = {"ENDPOINT", "STATE", "URL", "TYPES", "RETRY_SCHEDULE",
                                         "CHANGED"};
    cli_table t;
    if (!c->json)
        table_init(&t, titles, sizeof(titles) / sizeof(titles[0]));
    for (size_t i = 0; i < count; i++) {
        const tally_endpoint_definition *e = &list[i];
        char changed[40];
        time_text(e->changed_ms, changed);
        const char *state = e->disabled ? "disabled" : "enabled";
        if (c->json)
            json_emit(json_pack("{s:s, s:s, s:o, s:s, s:s, s:s, s:s, s:I, s:I, s:s}", "endpoint",
                                e->endpoint, "state", state, "version", json_u64(e->version),
                                "changed", changed, "url", e->url, "types", e->types,
                                "retry_schedule", e->retry_schedule, "connect_timeout_ms",
                                (json_int_t)e->connect_timeout_ms, "timeout_ms",
                                (json_int_t)e->timeout_ms, "backfill", e->backfill));
        else
            table_add(&t, "%s" SEP "%s" SEP "%s" SEP "%s" SEP "%s" SEP "%s", e->endpoint, state,
                      e->url, e->types[0] ? e->types : "*",
                      e->retry_schedule[0] ? e->retry_schedule : "-", changed);
    }
    if (!c->json)
        table_print_free(&t);
    free(list);
    return CLI_EXIT_OK;
}

int run_endpoint_attempts(cli *c)
{
    uint32_t limit = c->v[SLOT_LIMIT].set ? (uint32_t)c->v[SLOT_LIMIT].u : 100;
    tally_endpoint_attempt *list = calloc(limit, sizeof(*list));
    if (list == NULL)
        cli_out_of_memory();
    size_t count = 0;
    int rc = tally_endpoint_attempts(c->client, c->v[SLOT_ENDPOINT].text,
                                     c->v[SLOT_SEQ].set ? c->v[SLOT_SEQ].u : 0, limit, list,
                                     limit, &count);
    if (rc != TALLY_ok) {
        free(list);
        char what[96];
        snprintf(what, sizeof(what), "attempts of endpoint %s", c->v[SLOT_ENDPOINT].text);
        return read_failure(c, what, rc);
    }
    static const char *const titles[] = {"TIME", "SEQ", "ATTEMPT", "STATUS", "LATENCY_MS",
                                         "ERROR", "RESPONSE"};
    cli_table t;
    if (!c->json)
        table_init(&t, titles, sizeof(titles) / sizeof(titles[0]));
    for (size_t i = 0; i < count; i++) {
        const tally_endpoint_attempt *a = &list[i];
        char when[40], status[16] = "-";
        time_text(a->time_ms, when);
        if (a->status)
            snprintf(status, sizeof(status), "%" PRIu32, a->status);
        if (c->json)
            json_emit(json_pack("{s:s, s:I, s:o, s:I, s:I, s:I, s:s, s:s}", "time", when,
                                "time_ms", (json_int_t)a->time_ms, "seq", json_u64(a->seq),
                                "attempt", (json_int_t)a->attempt, "status",
                                (json_int_t)a->status, "latency_ms", (json_int_t)a->latency_ms,
                                "error", a->error, "response", a->response));
        else
            table_add(&t, "%s" SEP "%" PRIu64 SEP "%" PRIu32 SEP "%s" SEP "%" PRIu32 SEP "%s" SEP
                          "%s",
                      when, a->seq, a->attempt, status, a->latency_ms,
                      a->error[0] ? a->error : "-", a->response[0] ? a->response : "-");
    }
    if (!c->json)
        table_print_free(&t);
    free(list);
    return CLI_EXIT_OK;
}

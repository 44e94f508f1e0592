/*
 * endpoint_define.c — tally-relay's endpoints defined in tallyd at run
 * time (endpoint.h; docs/RELAY.md, "Endpoints managed at run time"):
 * endpoint_create, endpoint_update and endpoint_delete keep an endpoint's
 * definition (its URL, types, retry schedule, timeouts, backfill) in its
 * record of the `endpoints` database, its signing secret where
 * endpoint_rotate_secret keeps it, and append endpoint.created, .updated
 * or .deleted. A relay lists them (endpoint_list) and runs each.
 */
#include "ledger/endpoint.h"

#include "common/duration.h"
#include "common/error.h"
#include "common/log_event.h"
#include "common/webhook_secret.h"

#include <assert.h>
#include <string.h>

/* http:// or https://, then printable bytes without spaces. */
static bool url_valid(tally_str url)
{
    bool http = url.len > 7 && memcmp(url.ptr, "http://", 7) == 0;
    bool https = url.len > 8 && memcmp(url.ptr, "https://", 8) == 0;
    if (!(http || https) || url.len > TALLY_ENDPOINT_URL_BYTES_MAX)
        return false;
    for (size_t i = 0; i < url.len; i++)
        if ((unsigned char)url.ptr[i] <= 0x20 || (unsigned char)url.ptr[i] >= 0x7f)
            return false;
    return true;
}

/* One type pattern: "*", or 1-31 bytes of a-z 0-9 . _ with an optional
 * ".*" at the end. */
static bool type_valid(const char *p, size_t n)
{
    if (n == 1 && p[0] == '*')
        return true;
    if (n == 0 || n > TALLY_ENDPOINT_TYPE_BYTES_MAX)
        return false;
    size_t body = n >= 2 && p[n - 1] == '*' && p[n - 2] == '.' ? n - 1 : n;
    for (size_t i = 0; i < body; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '.' ||
              p[i] == '_'))
            return false;
    return true;
}

/* Patterns separated by spaces or commas, at most TALLY_ENDPOINT_TYPES_MAX
 * ("": every type). */
static bool types_valid(tally_str types)
{
    size_t count = 0, at = 0;
    if (types.len > TALLY_ENDPOINT_TYPES_BYTES_MAX)
        return false;
    while (at < types.len) {
        while (at < types.len && (types.ptr[at] == ' ' || types.ptr[at] == ','))
            at++;
        size_t end = at;
        while (end < types.len && types.ptr[end] != ' ' && types.ptr[end] != ',')
            end++;
        if (end > at && (++count > TALLY_ENDPOINT_TYPES_MAX || !type_valid(types.ptr + at, end - at)))
            return false;
        at = end;
    }
    return true;
}

/* "", "none", "all", or a seq >= 1. */
static bool backfill_valid(tally_str b)
{
    if (b.len == 0 || tally_str_equal(b, tally_str_from("none")) ||
        tally_str_equal(b, tally_str_from("all")))
        return true;
    if (b.len > 19 || b.ptr[0] == '0')
        return false;
    for (size_t i = 0; i < b.len; i++)
        if (b.ptr[i] < '0' || b.ptr[i] > '9')
            return false;
    return true;
}

static bool schedule_valid(tally_str schedule)
{
    uint32_t ms[DURATION_SCHEDULE_STEPS_MAX];
    size_t count;
    char why[96];
    return schedule.len == 0 ||
           duration_schedule_parse(schedule.ptr, schedule.len, ms, &count, why, sizeof(why));
}

int ledger_endpoint_definition_check(const ledger_endpoint *e, bool create)
{
    if (!ledger_endpoint_name_valid(e->name))
        return TALLY_invalid_endpoint_name;
    if ((create || e->has_url) && !url_valid(e->url))
        return TALLY_invalid_endpoint_url;
    uint8_t key[STANDARD_SECRET_BYTES_MAX];
    size_t len = 0;
    char why[128];
    if (create && !standard_secret_decode(e->secret.ptr, e->secret.len, key, &len, why,
                                          sizeof(why)))
        return TALLY_invalid_secret;
    if ((e->has_types && !types_valid(e->types)) ||
        (e->has_schedule && !schedule_valid(e->schedule)) ||
        (e->has_backfill && !backfill_valid(e->backfill)) ||
        e->connect_timeout_ms > TALLY_ENDPOINT_TIMEOUT_MS_MAX ||
        e->timeout_ms > TALLY_ENDPOINT_TIMEOUT_MS_MAX)
        return TALLY_value_out_of_range;
    return TALLY_ok;
}

static void text_set(char *out, size_t cap, tally_str v)
{
    assert(v.len < cap);
    memcpy(out, v.ptr, v.len);
    out[v.len] = '\0';
}

/* The fields e gives into s (checked by ledger_endpoint_definition_check). */
static void definition_apply(ledger_endpoint_state *s, const ledger_endpoint *e)
{
    if (e->has_url)
        text_set(s->url, sizeof(s->url), e->url);
    if (e->has_types)
        text_set(s->types, sizeof(s->types), e->types);
    if (e->has_schedule)
        text_set(s->schedule, sizeof(s->schedule), e->schedule);
    if (e->has_backfill)
        text_set(s->backfill, sizeof(s->backfill), e->backfill);
    if (e->has_connect_timeout)
        s->connect_timeout_ms = e->connect_timeout_ms;
    if (e->has_timeout)
        s->timeout_ms = e->timeout_ms;
}

static int count_defined(tally_str name, const ledger_endpoint_state *s, void *ctx)
{
    (void)name;
    *(size_t *)ctx += s->defined;
    return 0;
}

int ledger_endpoint_create_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    const ledger_endpoint *e = &cmd->u.endpoint;
    ledger_endpoint_state s;
    int rc = ledger_endpoint_get(ctx->txn, e->name, &s);
    if (rc != TALLY_ok)
        return rc;
    if (s.defined)
        return TALLY_endpoint_exists;
    size_t defined = 0;
    rc = ledger_endpoint_each(ctx->txn, count_defined, &defined);
    if (rc != TALLY_ok)
        return rc;
    if (defined >= TALLY_ENDPOINTS_DEFINED_MAX)
        return TALLY_too_many_endpoints;
    char why[128];
    bool ok = standard_secret_decode(e->secret.ptr, e->secret.len, s.secret, &s.secret_len, why,
                                     sizeof(why));
    assert(ok); /* validated */
    (void)ok;
    s.previous_len = 0;
    s.previous_until_ms = 0;
    s.defined = true;
    s.url[0] = s.types[0] = s.schedule[0] = s.backfill[0] = '\0';
    s.connect_timeout_ms = s.timeout_ms = 0;
    definition_apply(&s, e);
    return ledger_endpoint_commit(ctx, e->name, &s, LOG_EVENT_ENDPOINT_CREATED);
}

/* The state of an endpoint defined in tallyd: TALLY_endpoint_not_found
 * for one that is not, or a fault. */
static int defined_get(ledger_ctx *ctx, tally_str name, ledger_endpoint_state *s)
{
    int rc = ledger_endpoint_get(ctx->txn, name, s);
    return rc == TALLY_ok && !s->defined ? TALLY_endpoint_not_found : rc;
}

int ledger_endpoint_update_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    const ledger_endpoint *e = &cmd->u.endpoint;
    ledger_endpoint_state s;
    int rc = defined_get(ctx, e->name, &s);
    if (rc != TALLY_ok)
        return rc;
    definition_apply(&s, e);
    return ledger_endpoint_commit(ctx, e->name, &s, LOG_EVENT_ENDPOINT_UPDATED);
}

int ledger_endpoint_delete_apply(ledger_ctx *ctx, const ledger_command *cmd)
{
    const ledger_endpoint *e = &cmd->u.endpoint;
    ledger_endpoint_state s;
    int rc = defined_get(ctx, e->name, &s);
    if (rc != TALLY_ok)
        return rc;
    uint64_t version = s.version;
    memset(&s, 0, sizeof(s));
    s.version = version; /* its events go on counting */
    return ledger_endpoint_commit(ctx, e->name, &s, LOG_EVENT_ENDPOINT_DELETED);
}

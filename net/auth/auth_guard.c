/*
 * auth_guard.c — the current auth table, the per-request check, and the
 * refusals' counting and rate-limited log lines (see auth_guard.h).
 */
#include "net/auth/auth_guard.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define REFUSAL_LOG_INTERVAL_MS 1000

/* One reason's log lines: at most one per interval. */
typedef struct refusal_log {
    int64_t last_ms; /* mono clock of the last line */
    uint64_t suppressed;
} refusal_log;

struct auth_guard {
    pthread_rwlock_t rw;
    auth_table *table; /* under rw */
    pthread_mutex_t log_mu;
    refusal_log logs[2]; /* unauthenticated, forbidden */
};

auth_guard *auth_guard_create(auth_table *t)
{
    auth_guard *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return NULL;
    pthread_rwlock_init(&g->rw, NULL);
    pthread_mutex_init(&g->log_mu, NULL);
    g->table = t;
    for (int i = 0; i < 2; i++)
        g->logs[i].last_ms = INT64_MIN / 2;
    return g;
}

void auth_guard_swap(auth_guard *g, auth_table *t)
{
    pthread_rwlock_wrlock(&g->rw);
    auth_table *old = g->table;
    g->table = t;
    pthread_rwlock_unlock(&g->rw);
    auth_table_free(old); /* no check holds it any more */
}

void auth_guard_destroy(auth_guard *g)
{
    if (g == NULL)
        return;
    auth_table_free(g->table);
    pthread_rwlock_destroy(&g->rw);
    pthread_mutex_destroy(&g->log_mu);
    free(g);
}

/* A name from the request, printable: other bytes become '?'. */
static void printable(tally_str s, char *out, size_t size)
{
    size_t n = s.len < size - 1 ? s.len : size - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = s.ptr[i] > ' ' && s.ptr[i] < 127 ? s.ptr[i] : '?';
    out[n] = '\0';
}

/* Log the refusal unless a line for this reason left less than
 * a second ago (the token itself is never logged). */
static void refusal_note(auth_guard *g, int code, const char *op, const char *principal,
                         const char *detail)
{
    refusal_log *l = &g->logs[code == TALLY_forbidden];
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&g->log_mu);
    bool due = now - l->last_ms >= REFUSAL_LOG_INTERVAL_MS;
    uint64_t suppressed = l->suppressed;
    if (due) {
        l->last_ms = now;
        l->suppressed = 0;
    } else {
        l->suppressed++;
    }
    pthread_mutex_unlock(&g->log_mu);
    if (!due)
        return;
    char more[64] = "";
    if (suppressed)
        snprintf(more, sizeof(more), " (%llu more %s refusals not logged)",
                 (unsigned long long)suppressed, tally_strerror(code));
    net_log(NET_LOG_WARN, "auth: %s %s%s%s: %s%s", tally_strerror(code), op ? op : "a request",
            principal ? " from principal " : "", principal ? principal : "", detail, more);
}

int auth_guard_check(auth_guard *g, const auth_request *rq, char *detail, size_t detail_size)
{
    if (rq->op_name && rq->cls == AUTH_CLASS_NONE)
        return TALLY_ok;
    char principal[AUTH_NAME_BYTES_MAX + 1] = "";
    pthread_rwlock_rdlock(&g->rw);
    const auth_principal *p =
        rq->has_token ? auth_authenticate(g->table, rq->token.ptr, rq->token.len) : NULL;
    bool allowed = p && rq->op_name && auth_permits(p, rq->cls, rq->name);
    if (p)
        snprintf(principal, sizeof(principal), "%s", auth_principal_name(p));
    pthread_rwlock_unlock(&g->rw);
    if (p == NULL) {
        snprintf(detail, detail_size, "%s", rq->has_token ? "unknown token" : "no auth token");
        refusal_note(g, TALLY_unauthenticated, rq->op_name, NULL, detail);
        return TALLY_unauthenticated;
    }
    if (allowed || rq->op_name == NULL) /* no op: the decoder's refusal follows */
        return TALLY_ok;
    char name[AUTH_GLOB_BYTES_MAX + 1];
    printable(rq->name, name, sizeof(name));
    if (rq->cls == AUTH_CLASS_WRITE || rq->cls == AUTH_CLASS_SUBSCRIBE)
        snprintf(detail, detail_size, "needs grant %s:%s", auth_class_name(rq->cls), name);
    else
        snprintf(detail, detail_size, "needs grant %s", auth_class_name(rq->cls));
    refusal_note(g, TALLY_forbidden, rq->op_name, principal, detail);
    return TALLY_forbidden;
}

int auth_guard_whoami(auth_guard *g, tally_str token, char *name, size_t name_size, bool *read,
                      bool *admin)
{
    pthread_rwlock_rdlock(&g->rw);
    const auth_principal *p = auth_authenticate(g->table, token.ptr, token.len);
    if (p) {
        snprintf(name, name_size, "%s", auth_principal_name(p));
        *read = auth_permits(p, AUTH_CLASS_READ, (tally_str){NULL, 0});
        *admin = auth_permits(p, AUTH_CLASS_ADMIN, (tally_str){NULL, 0});
    }
    pthread_rwlock_unlock(&g->rw);
    if (p == NULL)
        refusal_note(g, TALLY_unauthenticated, "whoami", NULL, "unknown token");
    return p ? TALLY_ok : TALLY_unauthenticated;
}

int auth_guard_reload(auth_guard *g, const char *path)
{
    char why[512];
    auth_table *t = NULL;
    int rc = auth_table_load(path, &t, why, sizeof(why));
    if (rc != TALLY_ok) {
        net_log(NET_LOG_ERROR, "SIGHUP: auth file not reloaded, the old table stays: %s", why);
        return rc;
    }
    size_t n = auth_table_count(t);
    auth_guard_swap(g, t);
    net_log(NET_LOG_INFO, "SIGHUP: auth file %s reloaded (%zu principals)", path, n);
    return TALLY_ok;
}

/*
 * auth_guard.h — tallyd's current auth table and the check every request
 * passes before dispatch (net/engine/slot.c), for every transport: NNG, the JSON
 * API (whose requests reach the REP socket over inproc, with the Bearer
 * token as their `auth` field) — webhooks are authenticated by their
 * signatures instead (docs/WEBHOOKS.md).
 *
 * The table is swapped whole on SIGHUP (auth_guard_swap): a check holds a
 * read lock for the few microseconds of a hash and a comparison, so a
 * request is checked against exactly one table, and a principal removed
 * by a reload is refused from its next request on. Refusals are counted
 * (tally_auth_refused_total{reason}) and logged at warn, at most one line
 * a second per reason with the count of lines left out.
 */
#ifndef TALLY_NET_AUTH_GUARD_H
#define TALLY_NET_AUTH_GUARD_H

#include "net/auth/auth.h"

typedef struct auth_guard auth_guard;

/* A guard holding t (owned from now on). NULL when out of memory. */
auth_guard *auth_guard_create(auth_table *t);
/* Install t (owned from now on); the old table is freed once no check
 * uses it. */
void auth_guard_swap(auth_guard *g, auth_table *t);
void auth_guard_destroy(auth_guard *g);

/* What one request asks (has_token false: no `auth` field). */
typedef struct auth_request {
    bool has_token;
    tally_str token;
    auth_class cls;
    tally_str name;      /* the consumer (write) or subscriber name (subscribe) */
    const char *op_name; /* for the log line; NULL: the op is not known */
} auth_request;

/* TALLY_ok, TALLY_unauthenticated (no token, or one of no principal) or
 * TALLY_forbidden (outside the principal's grants; detail says which
 * grant was missing). A class-NONE op with a known op passes without a
 * token. Refusals are logged here (the caller counts them: metrics). */
int auth_guard_check(auth_guard *g, const auth_request *rq, char *detail, size_t detail_size);

/* Who token is (the console's sign-in, GET /v1/whoami): TALLY_ok with the
 * principal's name in name and whether it holds `read` and `admin`, or
 * TALLY_unauthenticated (a token of no principal; logged like a refused
 * request's). */
int auth_guard_whoami(auth_guard *g, tally_str token, char *name, size_t name_size, bool *read,
                      bool *admin);

/* Reload path into g: TALLY_ok (logged at info with the principal count),
 * or the error, logged, with the old table kept. */
int auth_guard_reload(auth_guard *g, const char *path);

#endif

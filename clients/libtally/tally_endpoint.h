/*
 * tally_endpoint.h — tally-relay's outbound webhook endpoints as tallyd
 * state (docs/RELAY.md, "Retry schedule and disabled endpoints"): disable
 * one (an endpoint.disabled event; the relays stop delivering to it),
 * enable it again, read its state. Included by tally.h.
 */
#ifndef TALLY_ENDPOINT_H
#define TALLY_ENDPOINT_H

#define TALLY_CLIENT_ENDPOINT_NAME_BYTES_MAX 58
#define TALLY_CLIENT_ENDPOINT_REASON_BYTES_MAX 256

typedef struct tally_endpoint_info {
    char endpoint[TALLY_CLIENT_ENDPOINT_NAME_BYTES_MAX + 1];
    bool disabled;
    uint64_t version;   /* its endpoint.* events so far; 0: never disabled */
    int64_t changed_ms; /* when the last one was committed */
    char reason[TALLY_CLIENT_ENDPOINT_REASON_BYTES_MAX + 1]; /* the last disable's, "" */
    int64_t previous_secret_until_ms; /* a rotation's overlap ends then; 0: none */
    int64_t recover_since_ms;         /* a recover asked and not done: from then; 0: none */
    uint64_t recover_version;         /* the version that asked it */
} tally_endpoint_info;

/* Disable the endpoint name with reason (NULL or "": none), under key (NULL: a
 * generated one), as tally_revoke writes: out->code is TALLY_ok,
 * TALLY_invalid_endpoint_name, a transport code, ... (the return value is
 * out->code). Requires the admin role under tallyd --auth. */
int tally_endpoint_disable(tally_client *c, const char *key, const char *name,
                           const char *reason, tally_result *out);
/* Enable the endpoint name again (an endpoint.enabled event), as above. */
int tally_endpoint_enable(tally_client *c, const char *key, const char *name,
                          tally_result *out);
/* The state of the endpoint name into *out (one tallyd never saw: enabled, version
 * 0). TALLY_ok, TALLY_invalid_endpoint_name or a transport code. */
int tally_endpoint_get(tally_client *c, const char *name, tally_endpoint_info *out);

/* Have the relays resend every event committed at or after since_ms (Unix
 * ms) to the endpoint name, as tally_revoke writes (an
 * endpoint.recover_requested event; admin). */
int tally_endpoint_recover(tally_client *c, const char *key, const char *name, int64_t since_ms,
                           tally_result *out);
/* A relay's word that the recover asked at recover_version is done (an
 * endpoint.recovered event; nothing when another was asked since). */
int tally_endpoint_recovered(tally_client *c, const char *key, const char *name,
                             uint64_t recover_version, tally_result *out);

/* ---- endpoints defined in tallyd (docs/RELAY.md, "Endpoints managed at
 * run time"): the relays start, change and stop delivering to them
 * without a restart ---- */

#define TALLY_CLIENT_ENDPOINT_URL_BYTES_MAX 1024
#define TALLY_CLIENT_ENDPOINT_TYPES_BYTES_MAX 512
#define TALLY_CLIENT_ENDPOINT_SCHEDULE_BYTES_MAX 512
#define TALLY_CLIENT_ENDPOINTS_DEFINED_MAX 32

/* endpoint_create and endpoint_update: a NULL text is not sent (update:
 * kept; create: tally-relay's default), a timeout only when set_. */
typedef struct tally_endpoint_args {
    const char *endpoint;       /* its name (1-58 bytes of A-Z a-z 0-9 . _ -) */
    const char *url;            /* http:// or https:// (required to create) */
    const char *secret;         /* [whsec_]<base64 of 24-64 bytes> (create only, required) */
    const char *types;          /* "transfer.* account.opened"; "": every type */
    const char *retry_schedule; /* "0 5s 5m 30m"; "": tally-relay's default */
    const char *backfill;       /* create only: none, all or a seq */
    bool set_connect_timeout, set_timeout;
    uint32_t connect_timeout_ms, timeout_ms; /* 0: tally-relay's default */
} tally_endpoint_args;

/* An endpoint defined in tallyd, as endpoint_list gives it (no secret). */
typedef struct tally_endpoint_definition {
    char endpoint[TALLY_CLIENT_ENDPOINT_NAME_BYTES_MAX + 1];
    bool disabled;
    uint64_t version;
    int64_t changed_ms;
    char url[TALLY_CLIENT_ENDPOINT_URL_BYTES_MAX + 1];
    char types[TALLY_CLIENT_ENDPOINT_TYPES_BYTES_MAX + 1];
    char retry_schedule[TALLY_CLIENT_ENDPOINT_SCHEDULE_BYTES_MAX + 1];
    char backfill[24];
    uint32_t connect_timeout_ms, timeout_ms;
} tally_endpoint_definition;

/* Define, change or remove an endpoint in tallyd (endpoint.created,
 * .updated, .deleted events; admin), as tally_revoke writes: out->code
 * TALLY_ok, TALLY_endpoint_exists, TALLY_endpoint_not_found,
 * TALLY_too_many_endpoints, TALLY_invalid_endpoint_url,
 * TALLY_invalid_secret, TALLY_value_out_of_range, a transport code ... */
int tally_endpoint_create(tally_client *c, const char *key, const tally_endpoint_args *a,
                          tally_result *out);
int tally_endpoint_update(tally_client *c, const char *key, const tally_endpoint_args *a,
                          tally_result *out);
int tally_endpoint_delete(tally_client *c, const char *key, const char *name, tally_result *out);
/* The endpoints defined in tallyd, in name order: up to capacity into
 * out, *count of them. TALLY_ok or the request's error. */
int tally_endpoint_list(tally_client *c, tally_endpoint_definition *out, size_t capacity,
                        size_t *count);

/* ---- signing secrets (docs/RELAY.md, "Secret rotation") ---- */

#define TALLY_CLIENT_ENDPOINT_SECRET_BYTES_MAX 64

/* Give the endpoint name a new signing secret ([whsec_]<base64 of 24-64
 * bytes>); the one before it (none in tallyd: the relay's config file's)
 * signs too for overlap_s seconds (at most 30 days), as tally_revoke
 * writes: TALLY_ok, TALLY_invalid_secret, TALLY_invalid_endpoint_name, ...
 * Admin under tallyd --auth. */
int tally_endpoint_rotate_secret(tally_client *c, const char *key, const char *name,
                                 const char *secret, uint32_t overlap_s, tally_result *out);

/* The signing secrets tallyd holds for an endpoint, decoded. */
typedef struct tally_endpoint_secrets {
    uint64_t version; /* the endpoint's, as tally_endpoint_info's */
    uint8_t secret[TALLY_CLIENT_ENDPOINT_SECRET_BYTES_MAX];
    size_t secret_len;                      /* 0: none (the relay's config file's) */
    uint8_t previous[TALLY_CLIENT_ENDPOINT_SECRET_BYTES_MAX];
    size_t previous_len;                    /* 0: the config file's */
    int64_t previous_until_ms;              /* the previous one signs until then; 0: not */
} tally_endpoint_secrets;

/* Read them (admin under tallyd --auth). TALLY_ok, a refusal or a
 * transport code. */
int tally_endpoint_secrets_get(tally_client *c, const char *name, tally_endpoint_secrets *out);

/* ---- the attempt log (docs/RELAY.md, "The attempt log") ---- */

#define TALLY_CLIENT_ATTEMPT_TEXT_BYTES_MAX 256
#define TALLY_CLIENT_ATTEMPTS_RECORD_MAX 100

/* One delivery attempt of an event to an endpoint. */
typedef struct tally_endpoint_attempt {
    uint64_t seq;        /* the event */
    uint32_t attempt;    /* 1 on its first delivery */
    int64_t time_ms;     /* when the request was sent */
    uint32_t status;     /* the HTTP status; 0: no answer */
    uint32_t latency_ms; /* request to answer (or failure) */
    char error[TALLY_CLIENT_ATTEMPT_TEXT_BYTES_MAX + 1];    /* why it failed, "" for 2xx */
    char response[TALLY_CLIENT_ATTEMPT_TEXT_BYTES_MAX + 1]; /* the body's first bytes */
} tally_endpoint_attempt;

/* Record count (1..TALLY_CLIENT_ATTEMPTS_RECORD_MAX) attempts to the
 * endpoint name in tallyd's attempt log, and have it remove the
 * endpoint's attempts older than retention_s (0: tallyd's default, 7
 * days). Recording an attempt again stores it once. TALLY_ok, a refusal
 * (TALLY_invalid_endpoint_name, TALLY_value_out_of_range, ...), a
 * transport code, TALLY_invalid_argument or TALLY_out_of_memory. Admin
 * under tallyd --auth. */
int tally_endpoint_attempts_record(tally_client *c, const char *name,
                                   const tally_endpoint_attempt *attempts, size_t count,
                                   uint32_t retention_s);
/* The endpoint's attempts, newest first (only those of seq when it is not
 * 0), at most min(limit, capacity) (limit 0: 100), into out; *count gets
 * how many. TALLY_ok, a refusal or a transport code. */
int tally_endpoint_attempts(tally_client *c, const char *name, uint64_t seq, uint32_t limit,
                            tally_endpoint_attempt *out, size_t capacity, size_t *count);

#endif

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

#endif

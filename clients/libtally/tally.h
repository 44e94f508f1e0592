/*
 * tally.h — libtally, the C client of tallyd.
 *
 * Every write carries an idempotency key under the client's consumer name.
 * Retries (after a timeout, `overloaded`, `shutting_down`,
 * `cluster_unavailable`, `cluster_diverged` or while the server is unreachable) resend the same request with the same key, so a
 * write takes effect at most once however often it is sent; a lost reply is
 * answered from the server's inbox (result.replayed). When the caller gives
 * no key, the library generates one (UUIDv7 text, time-ordered) once per
 * call and reports it in result.key, so the caller can retry by hand too.
 *
 * Thread safety: one tally_client may be used by any number of threads at
 * once (each call uses its own NNG context). A tally_batch belongs to one
 * thread until sent.
 *
 * Auto-batching (on by default): single writes (tally_account_open,
 * tally_transfer, tally_post, tally_void, tally_grant, tally_extend,
 * tally_revoke) made by many threads on one client are merged. A write
 * that finds fewer than two requests of single writes in flight on its
 * client is sent at once as its own request, exactly as without
 * auto-batching (no timer, no added wait). Otherwise it waits; when one of
 * those requests is answered, the writes waiting by then (at most
 * TALLY_CLIENT_BATCH_MAX, and what fits the server's 512 KiB request
 * limit; the rest waits for the next) go as ONE non-atomic `batch` request,
 * each member with its own key, sent with the same retries. Each caller
 * still gets its own tally_result: the code, replayed, seq, events and
 * key it would have got alone. A timeout, `overloaded`, `shutting_down` or
 * an unreachable server is every member's code, as it would be alone; a
 * refusal of the whole merged request (a member's field the server
 * refuses, e.g. a subject over 128 bytes) stores nothing, and each member
 * is then sent again alone, so a bad call fails only its own caller.
 * Chains and tally_batch_send are never merged. Turn it off with
 * tally_client_options.no_autobatch or TALLY_AUTOBATCH=off in the
 * environment; tally_client_counters_get shows what was merged.
 *
 * Return codes: every function returns an int from the tally error enum
 * (tally_error.h, names by tally_strerror):
 *   TALLY_ok            the server answered and the operation succeeded;
 *   a business or validation code (e.g. TALLY_exceeds_credits): the server
 *                       answered with that rejection (stored: retrying the
 *                       same key returns it again);
 *   a request code (e.g. TALLY_wrong_type): the request was refused as
 *                       malformed; nothing stored;
 *   TALLY_timed_out     no answer within timeout_ms after every retry: the
 *                       write may or may not have been applied — retry with
 *                       the same key (result.key) to find out;
 *   TALLY_unreachable   no attempt reached the server (no connection came up
 *                       within an attempt's connect wait, see
 *                       TALLY_CLIENT_CONNECT_WAIT_MS_MAX): nothing was
 *                       applied;
 *   TALLY_overloaded, TALLY_shutting_down, TALLY_storage_full, ...: server
 *                       faults still present after the retries;
 *   TALLY_invalid_argument  a bad argument (NULL, string too long) — nothing
 *                       was sent;
 *   TALLY_request_too_large  the packed request exceeds the server's 512 KiB
 *                       — nothing was sent;
 *   TALLY_internal      the reply was not msgpack of the documented shape
 *                       (or named a code this library does not know);
 *   TALLY_out_of_memory.
 * Read outputs are filled only on TALLY_ok. A write's result is cleared
 * first; its code and key are always set, the other fields when the server
 * answered.
 */
#ifndef TALLY_H
#define TALLY_H

#include "tally_error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TALLY_CLIENT_KEY_BYTES_MAX 128
#define TALLY_CLIENT_CONSUMER_BYTES_MAX 64
/* A token (tally_client_options.token): the server's `auth` field limit. */
#define TALLY_CLIENT_TOKEN_BYTES_MAX 256
#define TALLY_CLIENT_CHAIN_MAX 32
#define TALLY_CLIENT_BATCH_MAX 1000

/* Defaults of tally_client_options. */
#define TALLY_CLIENT_URL_DEFAULT "tcp://127.0.0.1:7450"
#define TALLY_CLIENT_URLS_MAX 16             /* in a url list (tally_client_options) */
#define TALLY_CLIENT_URL_LIST_BYTES_MAX 4096 /* a url list's bytes */
#define TALLY_CLIENT_CONSUMER_DEFAULT "default"
#define TALLY_CLIENT_TIMEOUT_MS_DEFAULT 5000
#define TALLY_CLIENT_RETRIES_DEFAULT 3
#define TALLY_CLIENT_BACKOFF_MS_DEFAULT 50
/* The wait before a retry doubles up to this. */
#define TALLY_CLIENT_BACKOFF_MS_MAX 10000
/* While no connection is up, an attempt waits at most this long (and at
 * most its timeout) for one before it counts as unreachable, so that an
 * absent server is reported quickly. */
#define TALLY_CLIENT_CONNECT_WAIT_MS_MAX 1000

/* ---- the client ---- */

typedef struct tally_client tally_client;

typedef struct tally_client_options {
    const char *url;      /* NULL: $TALLY_URL, else "tcp://127.0.0.1:7450"; a comma-
                             separated list of a cluster's nodes fails over
                             (docs/CLUSTER.md, "Failover for clients") */
    const char *consumer; /* NULL: $TALLY_CONSUMER, else "default"; 1-64 bytes */
    uint32_t timeout_ms;  /* per attempt; 0 = 5000 */
    uint32_t retries;     /* extra attempts after a retryable failure; default 3 when
                             retries_set is false */
    bool retries_set;     /* use retries as given (0 = no retry) */
    uint32_t backoff_ms;  /* wait before the first retry, doubled each time; 0 = 50 */
    bool no_autobatch;    /* true: every single write is its own request. false:
                             $TALLY_AUTOBATCH decides ("off"/"0" or "on"/"1"; unset
                             or empty: on); see "Auto-batching" above */
    const char *token;      /* sent as every request's `auth` (tallyd --auth,
                               docs/SECURITY.md), 1-256 bytes; NULL: read from
                               token_file, else $TALLY_TOKEN, else the file
                               $TALLY_TOKEN_FILE names, else none */
    const char *token_file; /* a file holding the token on one line (a trailing
                               newline is dropped); it must be private (mode 600:
                               a file the group or others may read is refused) */
    /* TLS, for a tls+tcp:// url (and a stream's tls+tcp:// publish URL):
     * PEM file paths; NULL: $TALLY_TLS_CA, $TALLY_TLS_CERT, $TALLY_TLS_KEY.
     * The server's certificate must chain to tls_ca and name the URL's
     * host; a tls+tcp:// url without a CA is refused (never unverified).
     * tls_cert and tls_key (mode 0600 or stricter) are the client
     * certificate, for a server that asks for one. Ignored for other URLs.
     * docs/SECURITY.md. */
    const char *tls_ca;
    const char *tls_cert;
    const char *tls_key;
} tally_client_options;

/* Create a client and start connecting (in the background: an absent
 * server is not an error here, and the connection is re-made whenever it
 * drops). On a tcp:// url nothing connects until the first call: each call
 * takes a connection of its own from the client's pool (made on demand,
 * kept for the next call) and speaks SP on it from the calling thread, so
 * a call costs no thread hand-off in the library; concurrent calls use as
 * many connections. $TALLY_CLIENT_TRANSPORT=nng puts tcp:// on NNG's REQ
 * socket instead (one connection, NNG's threads), as ipc://, ws:// and
 * tls+tcp:// always are. options may be NULL (all defaults). *out is set
 * on success only.
 * Returns TALLY_ok, TALLY_invalid_argument (out NULL, bad URL, consumer
 * empty or over 64 bytes, $TALLY_AUTOBATCH not one of on, 1, off, 0, a
 * token empty or over 256 bytes, a token file unreadable or not private,
 * tls+tcp:// url without a CA, a TLS file missing, unreadable, not PEM,
 * a key readable by group or others or not the certificate's: the CLI
 * says which with tally_tls_check),
 * TALLY_out_of_memory, TALLY_internal (NNG could not open a socket). */
int tally_client_open(const tally_client_options *options, tally_client **out);

/* Check the TLS files tally_client_open would use for options (NULL: the
 * environment's) and url: TALLY_ok, or TALLY_invalid_argument with why
 * (why_len bytes) naming the file and the reason (mbedTLS's words). For a
 * URL that is not tls+tcp:// nothing is read: TALLY_ok. */
int tally_tls_check(const tally_client_options *options, const char *url, char *why,
                    size_t why_len);

/* Close the client and free it. NULL is allowed. Writes and reads in
 * progress on other threads return first, promptly: a write still waiting
 * to be merged gets TALLY_unreachable (nothing was sent); a request being
 * sent, waiting for a connection or for its next retry returns
 * TALLY_unreachable when no attempt of it was delivered, else
 * TALLY_timed_out (it may have been applied: retry with the same key on
 * another client), or the fault the server answered last (e.g.
 * TALLY_overloaded). No call may start once close has begun, and streams and
 * subscribers of the client must be closed before. */
void tally_client_close(tally_client *client);

/* Cluster mode (docs/CLUSTER.md, "Reads"): tally_client_cluster_seq is the
 * highest cluster_seq a reply to c carried (a write's: the stream position
 * it was applied at; 0: none, single-node mode). tally_client_set_min_seq
 * makes every read op of c (gets, lists, pages, tally_log_read, stats) send
 * min_seq (0: none): the node answers once it has applied that position, or
 * TALLY_not_caught_up after its --cluster-read-wait-ms (single-node: once
 * its log's head seq reaches it). Both thread-safe. E.g. after a write on a,
 * tally_client_set_min_seq(b, tally_client_cluster_seq(a)): b reads it. */
uint64_t tally_client_cluster_seq(tally_client *c);
void tally_client_set_min_seq(tally_client *c, uint64_t min_seq);
/* cluster_status of the node c talks to (docs/CLUSTER.md): TALLY_ok,
 * TALLY_not_in_cluster_mode (single-node tallyd) or a transport code. */
typedef struct tally_cluster_status {
    char node[33], stream[33]; /* this node's --node, its --cluster-stream */
    uint64_t position;         /* the stream position this node has applied */
    uint64_t stream_last_seq;  /* the stream's last seq as this node last saw it */
    uint64_t lag_messages;     /* stream_last_seq - position, 0 when not behind */
    /* The last checkpoint this node compared (0: none yet), the nodes whose
     * state digest there is this node's, the nodes heard there; diverged:
     * the node stopped serving (its reads and writes get
     * TALLY_cluster_diverged). 0 from a tallyd without checkpoints. */
    uint64_t checkpoint_position;
    uint64_t checkpoint_agreeing, checkpoint_nodes;
    bool diverged;
} tally_cluster_status;
int tally_cluster_status_get(tally_client *c, tally_cluster_status *out);

/* What auto-batching did on a client, since it was opened. Requests are
 * counted once however often they were retried. */
typedef struct tally_client_counters {
    uint64_t writes;         /* single writes that were sent or queued */
    uint64_t requests;       /* requests sent for them: alone or merged */
    uint64_t batches;        /* ... of them merged `batch` requests */
    uint64_t batched_writes; /* single writes sent in those batches */
} tally_client_counters;

/* Copy the counters of c into *out (zeros for a NULL c; NULL out: nothing). */
void tally_client_counters_get(const tally_client *c, tally_client_counters *out);

/* ---- ids and keys ---- */

typedef struct tally_uuid {
    uint8_t bytes[16];
} tally_uuid;

/* A new UUIDv7 (time-ordered). Returns TALLY_ok, TALLY_invalid_argument
 * (out NULL) or TALLY_io_error (no randomness from the kernel). */
int tally_uuid_v7(tally_uuid *out);
/* 36-character text form with dashes, NUL-terminated (37 bytes). */
void tally_uuid_format(const tally_uuid *id, char out[37]);
/* Parse 32 hex digits, with or without dashes. Returns TALLY_ok or
 * TALLY_invalid_argument (NULL or malformed; *out untouched). */
int tally_uuid_parse(const char *text, tally_uuid *out);
/* The transfer id a key stands for: the first 16 bytes of
 * SHA-256("tally.transfer-id.v1" || consumer || 0x00 || key). Lets a tool
 * derive the id from the key so that a retry with the same key is the same
 * transfer. When the key is a UUIDv7 in text form (32 hex digits, dashes
 * allowed; what libtally generates), the id is a UUIDv7 too: the key's
 * 48-bit time, then bits of that digest with the version and variant set,
 * so ids of later keys sort later (time-ordered ids keep inserts at the
 * right edge of the store's B-trees). NULL consumer or key counts as "". */
void tally_uuid_from_key(const char *consumer, const char *key, tally_uuid *out);

/* ---- write results ---- */

typedef struct tally_result {
    int code;           /* TALLY_ok or the rejection / fault */
    bool replayed;      /* answered from the inbox: an earlier attempt applied it */
    uint64_t seq;       /* first event caused, 0 if none */
    uint32_t events;    /* number of events caused */
    char key[TALLY_CLIENT_KEY_BYTES_MAX + 1]; /* the key used (given or generated) */
    uint32_t chain_count;                     /* chains: member codes */
    int chain_codes[TALLY_CLIENT_CHAIN_MAX];
    int failed_index;                         /* chains: failing member, -1 if none */
    uint64_t original_seq; /* exists, exists_with_different_*: the seq of the event that
                              created the existing account or transfer; 0 otherwise
                              (id_already_failed: a failed attempt caused no event) */
} tally_result;

/* ---- writes (key NULL: generate one) ----
 * Each returns out->code: TALLY_ok, the stored rejection, a refusal, a
 * fault or a transport code (see the top of this file). out is always
 * cleared and out->key always set to the key (unless out is NULL); the
 * other fields are filled when the server answered. TALLY_invalid_argument
 * (nothing sent): c, out or the args NULL, a NULL subject/feature/
 * pending_id, a key empty or over 128 bytes. TALLY_request_too_large: the
 * packed request is over 512 KiB (nothing sent). */

#define TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS 1u
#define TALLY_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS 2u
#define TALLY_ACCOUNT_CLOSED 4u /* read only: set by a closing transfer */
#define TALLY_ACCOUNT_IMPORTED 8u /* imported history: opened at timestamp_ms */
#define TALLY_TRANSFER_PENDING 1u
#define TALLY_TRANSFER_BALANCING_DEBIT 2u  /* move at most what the debit account has */
#define TALLY_TRANSFER_BALANCING_CREDIT 4u /* at most what the credit account may take */
#define TALLY_TRANSFER_CLOSING_DEBIT 8u    /* with PENDING: close the debit account */
#define TALLY_TRANSFER_CLOSING_CREDIT 16u  /* with PENDING: close the credit account */
#define TALLY_TRANSFER_IMPORTED 32u        /* imported history: created at timestamp_ms */

/* The caller's own data on an account or a transfer (an invoice, a
 * customer, a tenant): set when it is created, never changed, returned by
 * every read; 0 is none (and is not sent). */
typedef struct tally_user_data {
    tally_uuid user_data_128;
    uint64_t user_data_64;
    uint32_t user_data_32;
} tally_user_data;

typedef struct tally_account_open_args {
    uint64_t id;
    uint32_t ledger;
    uint16_t code;
    uint16_t flags;
    tally_user_data user_data;
    int64_t timestamp_ms; /* with TALLY_ACCOUNT_IMPORTED: its creation time, Unix ms (sent when != 0) */
} tally_account_open_args;

typedef struct tally_transfer_args {
    tally_uuid id;
    uint64_t debit_account_id;
    uint64_t credit_account_id;
    int64_t amount;
    uint32_t ledger;
    uint16_t code;
    uint16_t flags;     /* TALLY_TRANSFER_PENDING for a hold */
    uint32_t timeout_s; /* holds: 0 = never expires */
    tally_user_data user_data;
    int64_t timestamp_ms; /* with TALLY_TRANSFER_IMPORTED: its creation time, Unix ms (sent when != 0) */
} tally_transfer_args;

typedef struct tally_entitlement_args {
    const char *subject;
    const char *feature;
    int64_t valid_until_ms; /* 0 = not given */
    int64_t duration_ms;    /* 0 = not given; grant with neither = for life */
    bool has_source_order;
    uint64_t source_order;
    bool has_grant_transfer;
    tally_uuid grant_transfer_id;
} tally_entitlement_args;

int tally_account_open(tally_client *c, const char *key, const tally_account_open_args *a,
                       tally_result *out);
int tally_transfer(tally_client *c, const char *key, const tally_transfer_args *t,
                   tally_result *out);
/* amount 0 posts the full held amount. */
int tally_post(tally_client *c, const char *key, const tally_uuid *pending_id, int64_t amount,
               tally_result *out);
int tally_void(tally_client *c, const char *key, const tally_uuid *pending_id, tally_result *out);
/* The entitlement ops send only the fields the caller set (valid_until_ms
 * and duration_ms when != 0, source_order and grant_transfer_id when
 * has_*); a field the op does not take (e.g. duration_ms with revoke) is
 * refused by the server with TALLY_unknown_field. */
int tally_grant(tally_client *c, const char *key, const tally_entitlement_args *e,
                tally_result *out);
int tally_extend(tally_client *c, const char *key, const tally_entitlement_args *e,
                 tally_result *out);
int tally_revoke(tally_client *c, const char *key, const tally_entitlement_args *e,
                 tally_result *out);

/* ---- batches and atomic chains ----
 * A batch holds up to TALLY_CLIENT_BATCH_MAX independent writes, each with
 * its own key and result; a chain (atomic) up to TALLY_CLIENT_CHAIN_MAX
 * writes applied all-or-nothing under one key. Add functions return
 * TALLY_ok, TALLY_too_many_operations, TALLY_invalid_argument (as for the
 * single writes; nothing added) or TALLY_out_of_memory; in a chain the
 * member key is ignored. Argument strings are copied when added. */

typedef struct tally_batch tally_batch;

/* A new empty batch (atomic: a chain), or NULL when out of memory. A chain
 * gets its key here (a UUIDv7), used when it is sent without a key, so
 * re-sending the same chain is a retry too. */
tally_batch *tally_batch_new(bool atomic);
/* Free a batch (NULL allowed). */
void tally_batch_free(tally_batch *b);
/* Members added so far (0 for NULL). */
size_t tally_batch_count(const tally_batch *b);
int tally_batch_account_open(tally_batch *b, const char *key, const tally_account_open_args *a);
int tally_batch_transfer(tally_batch *b, const char *key, const tally_transfer_args *t);
int tally_batch_post(tally_batch *b, const char *key, const tally_uuid *pending_id, int64_t amount);
int tally_batch_void(tally_batch *b, const char *key, const tally_uuid *pending_id);
int tally_batch_grant(tally_batch *b, const char *key, const tally_entitlement_args *e);
int tally_batch_extend(tally_batch *b, const char *key, const tally_entitlement_args *e);
int tally_batch_revoke(tally_batch *b, const char *key, const tally_entitlement_args *e);

/* Send a batch: results[i] (capacity >= tally_batch_count) gets member i's
 * result; key is ignored. Send a chain: results[0] gets the chain's result
 * under key (NULL: the chain's own key, made by tally_batch_new).
 * Members without a key get generated keys when added. The same batch may be sent again: same keys, so a resend is
 * a retry. Every result's key is set; for a chain results[0].chain_codes
 * and failed_index tell which member failed.
 * Returns TALLY_ok when the server decided: every results[i].code is that
 * write's outcome (TALLY_ok or a stored rejection; in a batch a member may
 * also carry a fault such as storage_full, retry it with the same key).
 * Otherwise the code that prevented a decision, also copied into every
 * results[i].code: a refusal of the whole request (e.g.
 * TALLY_unknown_field, TALLY_value_out_of_range for an empty batch), a
 * server fault, TALLY_timed_out, TALLY_unreachable, TALLY_request_too_large
 * or TALLY_invalid_argument (c, b or results NULL, results_capacity too
 * small: nothing sent, results untouched). */
int tally_batch_send(tally_client *c, tally_batch *b, const char *key, tally_result *results,
                     size_t results_capacity);

/* ---- reads ---- */

typedef struct tally_account {
    uint64_t id;
    uint32_t ledger;
    uint16_t code;
    uint16_t flags;
    int64_t debits_posted, credits_posted, debits_pending, credits_pending;
    uint64_t version;
    uint64_t created_seq;
    int64_t created_ms; /* 0: opened by a tallyd before store format 6 */
    tally_user_data user_data;
} tally_account;

typedef struct tally_transfer_info {
    tally_uuid id;
    uint64_t debit_account_id, credit_account_id;
    int64_t amount;
    uint32_t ledger;
    uint16_t code, flags;
    char state[24]; /* posted, pending, pending_posted, pending_voided, pending_expired */
    uint32_t timeout_s;
    int64_t expires_at_ms, posted_amount;
    uint64_t version, created_seq, resolved_seq;
    int64_t created_ms;
    tally_user_data user_data;
    tally_uuid reverses;     /* a reversal: the transfer it reverses (zeros: none) */
    int64_t reversed_amount; /* what reversals moved back of this transfer */
} tally_transfer_info;

typedef struct tally_entitlement {
    char subject[129];
    char feature[65];
    char state[16];          /* active, revoked, expired (evaluated at the server's now) */
    bool lifetime;
    int64_t valid_until_ms;  /* 0 when lifetime */
    uint64_t version;
    bool has_source_order;
    uint64_t source_order;
    int64_t granted_ms, updated_ms;
    bool has_grant_transfer;       /* the grant named the transfer that paid */
    tally_uuid grant_transfer_id;
} tally_entitlement;

typedef struct tally_history_entry {
    uint64_t seq;
    char type[32];
    int64_t time_ms;
    tally_transfer_info transfer;
    tally_account account; /* this account right after the event */
} tally_history_entry;

/* The kind of entity an event is about, as a number (tally_event.kind). */
typedef enum tally_entity_kind {
    TALLY_ENTITY_ACCOUNT = 1,
    TALLY_ENTITY_TRANSFER = 2,
    TALLY_ENTITY_ENTITLEMENT = 3,
    TALLY_ENTITY_DEAD_LETTER = 4, /* dead_letter.expired (tallyd --dlq-retention-s) */
    TALLY_ENTITY_WEBHOOK = 5,     /* webhook.received (tallyd --webhooks, docs/WEBHOOKS.md) */
    TALLY_ENTITY_SUBSCRIBER = 6,  /* subscriber.expired (a subscriber's inactive_expiry_ms) */
    TALLY_ENTITY_ENDPOINT = 7,    /* endpoint.disabled, endpoint.enabled (docs/RELAY.md) */
} tally_entity_kind;

#define TALLY_EVENT_HASH_BYTES 32

struct msgpack_object; /* msgpack-c's; tally_inbox.h includes <msgpack.h> */

/* An event from the log, decoded (docs/EVENTS.md): the one event type of
 * libtally, handed out by tally_log_read, the live stream, durable
 * subscribers (tally_delivery.event) and the subscriber-side inbox
 * (tally_inbox_event is this type). Every event libtally hands out was
 * decoded by the same codec as tallyd's log and checked: its structure and
 * types, its bounds, and its own hash over its bytes; the stream and
 * durable subscribers also check the chain (prev_hash) wherever they know
 * the previous event's hash (docs/SUBSCRIBERS.md, "What is checked").
 * Strings are NUL-terminated copies. Who owns raw and body depends on who
 * handed the event out: see each function. */
typedef struct tally_event {
    uint64_t seq;
    tally_uuid id;
    char type[32];
    /* The entity the event is about (docs/EVENTS.md): entity_kind is
     * "account" (account_id set), "transfer" (transfer_id set),
     * "entitlement" (subject and feature set) or "dead_letter" (subject:
     * the subscriber's name, feature: the dead letter's seq as decimal
     * text; the rest is in the body's TALLY_PART_DEAD_LETTER), "webhook"
     * (subject: the webhook source, feature: the provider's event id; the
     * delivery is the body's TALLY_PART_WEBHOOK), "subscriber" (subject:
     * its name; the rest is the body's TALLY_PART_SUBSCRIBER), "endpoint"
     * (subject: the endpoint's name; TALLY_PART_ENDPOINT); the others
     * are zero / "".
     * kind is the same as a number (before the types were one, the inbox's
     * event called it entity_kind: use kind there now). */
    char entity_kind[16];
    tally_entity_kind kind;
    uint64_t account_id;
    tally_uuid transfer_id;
    char subject[129];
    char feature[65];
    size_t subject_len, feature_len; /* tell embedded NULs apart */
    uint64_t entity_version; /* the entity's version after this event */
    int64_t time_ms;
    char consumer[65]; /* causation; "" for events of the expiry sweep */
    char key[TALLY_CLIENT_KEY_BYTES_MAX + 1];
    uint8_t prev_hash[TALLY_EVENT_HASH_BYTES]; /* the previous event's hash */
    uint8_t hash[TALLY_EVENT_HASH_BYTES];      /* this event's chain hash */
    /* The body map (full objects after the change), set in the inbox's
     * callbacks (valid during the call); NULL elsewhere: unpack raw with
     * tally_msgpack_unpack (tally_inbox.h) to read it there. */
    const struct msgpack_object *body;
    const uint8_t *raw; /* the event's msgpack bytes (hash-chained) */
    size_t raw_len;
} tally_event;

/* The parts of an event body by role (docs/EVENTS.md). The body is a map of
 * named objects in events of format 1 and an array of rows in format 2;
 * tally_event_part finds a part in either, and tally_account_from_msgpack
 * and its siblings (tally_inbox.h) read either form of an object. */
typedef enum tally_body_part {
    TALLY_PART_ACCOUNT = 0,        /* account events: the account */
    TALLY_PART_TRANSFER = 1,       /* transfer events: the transfer, */
    TALLY_PART_DEBIT_ACCOUNT = 2,  /* its debit account */
    TALLY_PART_CREDIT_ACCOUNT = 3, /* and its credit account, after the change */
    TALLY_PART_ENTITLEMENT = 4,    /* entitlement events: the entitlement */
    TALLY_PART_DEAD_LETTER = 5,    /* dead-letter events: [subscriber, seq, attempts,
                                      parked_ms, error] */
    TALLY_PART_WEBHOOK = 6,        /* webhook events: [source, event_id, event_type or nil,
                                      signed_at_s, body (bin)] */
    TALLY_PART_SUBSCRIBER = 7,     /* subscriber events: [name, ack_floor, delivered_seq,
                                      in_flight, dead_letters, active_ms,
                                      inactive_expiry_ms, contact or nil] */
    TALLY_PART_ENDPOINT = 8,       /* endpoint events: [name, state, reason] */
} tally_body_part;
/* The part of ev's body (ev->body must be set, as in the inbox's callbacks),
 * or NULL when the event's kind has no such part. */
const struct msgpack_object *tally_event_part(const tally_event *ev, tally_body_part part);

typedef struct tally_stats {
    uint64_t head_seq, first_seq, accounts, transfers, entitlements, inbox, events;
    uint64_t map_used_bytes, map_size_bytes;
    uint64_t map_max_bytes; /* what tallyd may grow the map to (--map-max-mb); 0 from a
                               server before it */
    uint64_t subscribers; /* durable subscribers (their metrics: tally_stats_subscribers) */
    uint64_t inbox_oldest_age_s; /* age of the oldest idempotency record */
    uint64_t log_floor;          /* last seq removed by log retention, 0 = none */
} tally_stats;

/* Reads. Each returns TALLY_ok (outputs filled), TALLY_not_found, a
 * refusal from the server (e.g. TALLY_subject_must_not_be_empty,
 * TALLY_value_out_of_range), a fault, TALLY_timed_out, TALLY_unreachable,
 * TALLY_invalid_argument (a NULL pointer or a zero capacity: nothing sent),
 * TALLY_out_of_memory, or TALLY_internal when the reply does not have the
 * documented shape. Reads are retried like writes (they change nothing). */
int tally_account_get(tally_client *c, uint64_t id, tally_account *out);
int tally_transfer_get(tally_client *c, const tally_uuid *id, tally_transfer_info *out);
int tally_entitlement_get(tally_client *c, const char *subject, const char *feature,
                          tally_entitlement *out);
/* A page of accounts in id order: those with an id above after_id (0:
 * from the first), at most min(limit, capacity, 1000) (limit 0: 100), each
 * as tally_account_get gives it; *next = the id to pass as after_id for the
 * next page, 0 when no account follows. An empty store is TALLY_ok with
 * *count 0. */
int tally_account_list(tally_client *c, uint64_t after_id, uint32_t limit, tally_account *out,
                       size_t capacity, size_t *count, uint64_t *next);

/* Up to capacity entitlements of subject, in feature order; *count gets
 * how many were stored (when the subject has more, the first capacity). */
int tally_entitlement_list(tally_client *c, const char *subject, tally_entitlement *out,
                           size_t capacity, size_t *count);
/* History page of up to min(limit, capacity, 1000) entries (limit 0: 100),
 * oldest first (reverse: newest first). after_seq 0 = from the start (or,
 * reverse, from the end); *next = seq to pass as after_seq for the next
 * page, 0 when no more. TALLY_not_found when the account does not exist. */
int tally_account_history(tally_client *c, uint64_t id, uint64_t after_seq, uint32_t limit,
                          bool reverse, tally_history_entry *out, size_t capacity,
                          size_t *count, uint64_t *next);
/* Events from from_seq (0 = 1), at most min(limit, capacity, 1000) (limit
 * 0: 100) and at most 2 MiB of them, but at least one when there is one
 * (docs/PROTOCOL.md, "Pages of events"): a page shorter than asked is not
 * the end of the log; read on from the last seq + 1 until *head_seq.
 * *head_seq gets the last committed seq. wait_ms > 0 (at most
 * 30000): when no event at from_seq exists yet, the server holds the
 * request until one is committed or wait_ms passes (then *count = 0); each
 * attempt then waits timeout_ms + wait_ms. raw pointers stay valid until
 * tally_events_release(out, *count), which the caller must call after
 * TALLY_ok (on any other code nothing is allocated); body is NULL. Each
 * event is checked as tally_event says, and so is the chain inside the
 * page: TALLY_internal for an event that fails its own checks (its hash
 * among them), TALLY_corrupt_record when an event's prev_hash is not the
 * hash of the event before it. */
int tally_log_read(tally_client *c, uint64_t from_seq, uint32_t limit, uint32_t wait_ms,
                   tally_event *out, size_t capacity, size_t *count, uint64_t *head_seq);
void tally_events_release(tally_event *events, size_t count);
int tally_stats_get(tally_client *c, tally_stats *out);

/* Ask tallyd for an online, compacting, consistent copy of its store into
 * the directory path on the server's machine (absolute; must not exist;
 * below tallyd's --backup-dir when it has one); *bytes gets the copy's
 * size (docs/OPERATIONS.md). Each attempt may take up to the client's
 * timeout plus 10 minutes. Returns TALLY_ok, TALLY_backup_destination_exists,
 * TALLY_backup_destination_invalid, TALLY_storage_full, TALLY_io_error, a
 * transport code, or TALLY_invalid_argument (NULL, or path not absolute:
 * nothing sent). A retry after a lost reply finds the first copy there and
 * answers backup_destination_exists: check the directory with tally-recon. */
int tally_backup(tally_client *c, const char *path, uint64_t *bytes);

/* One of tallyd's health checks (the health op; docs/OPERATIONS.md). */
typedef struct tally_health_check {
    char check[32];      /* readiness: map_room_kib, disk_free_mb, storage_full,
                            writer_stall_ms; alert: map_used_pct, pending,
                            oldest_unacked_s, dead_letters, idle_subscriber_s */
    char subscriber[65]; /* "" for a check of the store */
    bool ok;             /* false: the check fails (value above its threshold, or below
                            for map_room_kib and disk_free_mb) */
    uint64_t value, threshold;
    char reason[192];    /* why it fails; "" when ok */
} tally_health_check;

/* tallyd's health checks against its alert thresholds (--alert-*): *healthy
 * is true when none fails; up to capacity checks go to out, *count gets how
 * many were stored. TALLY_ok, or a transport code or shutting_down. */
int tally_health(tally_client *c, bool *healthy, tally_health_check *out, size_t capacity,
                 size_t *count);

/* A health check's class: readiness (one failing makes GET /readyz 503:
 * tallyd cannot take writes now) or alert (for an operator; never a 503). */
typedef enum tally_check_class { TALLY_CHECK_READINESS, TALLY_CHECK_ALERT } tally_check_class;

/* tally_health with the classes: *ready is true when no readiness check
 * fails, *healthy when no check fails at all; classes[i] gets out[i]'s
 * class (classes has capacity entries). A tallyd that predates the classes
 * sends none: its checks are readiness checks then, as its /readyz made
 * each a 503. Returns as tally_health. */
int tally_health_classes(tally_client *c, bool *ready, bool *healthy, tally_health_check *out,
                         tally_check_class *classes, size_t capacity, size_t *count);

/* ---- live stream: PUB with gap fill ----
 * A cursor-less reader of the log that hands out every event from a
 * starting seq exactly once, in seq order, with none skipped. It listens on
 * tallyd's PUB socket (one message per committed event) and uses log_read
 * for everything PUB did not bring: a message whose seq is past the next
 * expected one reveals a gap, filled with log_read before going on; a seq
 * already handed out is dropped; when PUB has been silent for idle_ms the
 * stream long-polls log_read, so a lost tail is found too. The position is
 * kept in memory only: after a restart, open the stream again from the
 * last seq you processed + 1 (or use a durable subscriber, below).
 * Memory is bounded: the SUB socket queues at most recv_buffer messages
 * and the stream holds at most fill_events read events.
 * A stream is used by one thread at a time; several streams may share a
 * client. */

#define TALLY_STREAM_FROM_NOW 0          /* from_seq: the first event after the head */
#define TALLY_STREAM_IDLE_MS_DEFAULT 1000
#define TALLY_STREAM_IDLE_MS_MAX 30000
#define TALLY_STREAM_FILL_EVENTS_DEFAULT 1000
#define TALLY_STREAM_FILL_EVENTS_MAX 1000
#define TALLY_STREAM_RECV_BUFFER_MAX 8192

typedef struct tally_stream tally_stream;

typedef struct tally_stream_options {
    uint32_t recv_buffer; /* PUB messages the SUB socket queues, 1..8192;
                             0 = NNG's default (128). A reader that falls
                             further behind loses messages (and fills them) */
    uint32_t idle_ms;     /* PUB silent this long: poll log_read; 0 = 1000,
                             at most 30000 */
    uint32_t fill_events; /* events per log_read, 1..1000; 0 = 1000 */
} tally_stream_options;

typedef struct tally_stream_counters {
    uint64_t next_seq;     /* the seq the next event will have */
    uint64_t delivered;    /* events handed out */
    uint64_t from_publish; /* ... of them received on PUB */
    uint64_t from_fill;    /* ... of them read with log_read */
    uint64_t gaps;         /* PUB messages past the next expected seq */
    uint64_t duplicates;   /* PUB messages dropped: already handed out */
    uint64_t polls;        /* log_read calls because PUB was silent */
    uint64_t reads;        /* log_read calls in all (gap fills, catch-up, polls) */
    uint64_t refused;      /* PUB messages dropped: not an event, a failed hash, or
                              not chained to the event handed out before */
} tally_stream_counters;

/* Open a stream on client c that starts at from_seq (1 = the whole log;
 * TALLY_STREAM_FROM_NOW = after the current head, which is read from the
 * server now). pub_url: tallyd's PUB endpoint (tallyd --publish; default
 * tcp://127.0.0.1:7451); it is dialed in the background, an absent
 * publisher is not an error. pub_url NULL: no PUB, the stream long-polls
 * log_read only. options may be NULL (defaults). *out is set on success.
 * Returns TALLY_ok; TALLY_invalid_argument (c or out NULL, a bad URL, an
 * option out of range); TALLY_out_of_memory; TALLY_internal (NNG could not
 * open a socket); with TALLY_STREAM_FROM_NOW also the codes of
 * tally_stats_get (e.g. TALLY_unreachable). */
int tally_stream_open(tally_client *c, const char *pub_url, uint64_t from_seq,
                      const tally_stream_options *options, tally_stream **out);

/* Wait up to timeout_ms (0: do not wait) for the next event and hand it
 * out in *out: its seq is exactly one more than the previous one's (the
 * first is from_seq). The caller owns out->raw: release it with
 * tally_events_release(out, 1). Returns TALLY_ok (*out filled);
 * TALLY_timed_out (no event within timeout_ms, or a log_read that got no
 * answer in time: call again); the codes of
 * tally_log_read (e.g. TALLY_unreachable after the client's retries: the
 * stream is unchanged, call again); TALLY_not_found (the events from the
 * next seq are no longer in the log); TALLY_internal (the server sent
 * events that are not the next ones); TALLY_corrupt_record (the log_read
 * events do not chain to the last event handed out: prev_hash is not its
 * hash; the stream is unchanged); TALLY_invalid_argument (s or out NULL).
 * *out is filled only on TALLY_ok. Hash checks: every event's own hash;
 * each event's prev_hash against the hash of the one handed out before
 * it. A PUB message that fails either is dropped (counters.refused) and
 * the event is read with log_read instead. */
int tally_stream_next(tally_stream *s, tally_event *out, uint32_t timeout_ms);

/* The stream's position and counters so far (for metrics and tests). */
void tally_stream_counters_get(const tally_stream *s, tally_stream_counters *out);

/* Close the stream and free it (events still held are dropped; the next
 * stream can start at counters.next_seq). NULL is allowed. */
void tally_stream_close(tally_stream *s);

/* Send a raw msgpack request and receive the raw reply (malloc'd; free()
 * it). For tools and tests. Retries like every other call (the same
 * bytes; a reply with code overloaded or shutting_down is retried too); a
 * top-level wait_ms in the request lengthens each attempt as for
 * tally_log_read; a request map without `auth` gets the client's token
 * (when it has one). Returns TALLY_ok whenever a reply arrived, whatever its
 * code (*reply and *reply_len set); else TALLY_timed_out,
 * TALLY_unreachable, TALLY_invalid_argument (NULL, len 0),
 * TALLY_out_of_memory. */
int tally_request_raw(tally_client *c, const void *request, size_t len, void **reply,
                      size_t *reply_len);

#include "tally_subscriber.h" /* durable subscribers and dead letters */
#include "tally_queries.h"    /* queries and reversals (tally_reverse) */
#include "tally_endpoint.h"   /* tally-relay's endpoints: disable, enable */

#ifdef __cplusplus
}
#endif
#endif

/*
 * protocol.h — tally's wire protocol: the op table, request decoding, and
 * what an op's row names (docs/PROTOCOL.md is the contract).
 *
 * One table (net_ops, net/ops/op_table.c) lists every op: its kind, its fields
 * as data (name, type, required, limit, description, where the decoder puts
 * the value; declared with the op's struct in net/ops/op_fields.h), the
 * builder that turns the filled struct into a request, and its behaviour —
 * the read handler, or the writer-side apply function and the reply
 * encoder. The
 * decoder checks a request against the row before anything else happens;
 * the dispatcher (net/engine/slot.c, net/engine/writer.c) routes by the row alone, and
 * `tallyd --protocol-reference` prints the same table as the reference
 * section of docs/PROTOCOL.md. docs/DESIGN.md, "Adding an op", says what a
 * new op needs.
 *
 * A decoded request borrows strings from the message bytes it was decoded
 * from: keep the message until the request is done.
 */
#ifndef TALLY_NET_PROTOCOL_H
#define TALLY_NET_PROTOCOL_H

#include "common/limits.h"
#include "ledger/endpoint.h"
#include "ledger/ledger.h"
#include "ledger/balances.h"
#include "ledger/query.h"
#include "log/subscriber.h"
#include "net/auth/auth.h"
#include "net/ops/out.h"

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum net_field_type {
    NET_FIELD_UINT,   /* positive integer up to max */
    NET_FIELD_AMOUNT, /* integer; negative passes to the ledger, > 2^63-1 is amount_overflows */
    NET_FIELD_INT,    /* signed integer (times) */
    NET_FIELD_STR,    /* string of at most max bytes */
    NET_FIELD_ID128,  /* bin of exactly 16 bytes */
    NET_FIELD_BOOL,
    NET_FIELD_OPS,    /* array of op maps, at most max */
    NET_FIELD_UINTS,  /* array of at most max positive integers */
    NET_FIELD_MAPS,   /* array of at most max maps, each checked by the op's builder */
} net_field_type;

typedef struct net_field {
    const char *name;
    net_field_type type;
    bool required;
    uint64_t max;     /* UINT: largest value; STR: bytes; OPS: count */
    const char *doc;
    size_t offset;     /* where the decoder stores the value in the op's struct */
    size_t has_offset; /* and the bool that says it was sent */
} net_field;

/* An array field's elements (OPS: maps; UINTS: positive integers, checked
 * against the row), pointing into the decoded message. */
typedef struct net_list {
    const msgpack_object *items;
    uint32_t count;
} net_list;

/* An op's fields are declared once, as an X-macro list of
 * F(T, type, name, presence, max, doc) (net/ops/op_fields.h); these make
 * of one list both the struct T that the decoder fills (a member `name`
 * of the type's C type and a `has_name`) and the table's net_field rows,
 * so a handler that names a field the op does not have does not compile.
 * presence is REQUIRED or OPTIONAL. */
#define NET_CTYPE_UINT uint64_t
#define NET_CTYPE_AMOUNT int64_t
#define NET_CTYPE_INT int64_t
#define NET_CTYPE_STR tally_str
#define NET_CTYPE_ID128 tally_id128
#define NET_CTYPE_BOOL bool
#define NET_CTYPE_OPS net_list
#define NET_CTYPE_UINTS net_list
#define NET_CTYPE_MAPS net_list
#define NET_PRESENCE_REQUIRED true
#define NET_PRESENCE_OPTIONAL false

#define NET_FIELD_MEMBER(T, type, name, presence, max, doc) \
    NET_CTYPE_##type name;                                  \
    bool has_##name;
#define NET_FIELD_ROW(T, type, name, presence, max, doc)                                  \
    {#name, NET_FIELD_##type, NET_PRESENCE_##presence, (max), (doc), offsetof(T, name), \
     offsetof(T, has_##name)},

typedef enum net_op_id {
    NET_OP_ACCOUNT_OPEN, NET_OP_TRANSFER, NET_OP_POST, NET_OP_VOID,
    NET_OP_GRANT, NET_OP_EXTEND, NET_OP_REVOKE, NET_OP_CHAIN, NET_OP_BATCH,
    NET_OP_ACCOUNT_GET, NET_OP_ACCOUNT_HISTORY, NET_OP_ACCOUNT_LIST, NET_OP_TRANSFER_GET,
    NET_OP_ENTITLEMENT_GET, NET_OP_ENTITLEMENT_LIST, NET_OP_LOG_READ, NET_OP_STATS,
    NET_OP_SUB_CREATE, NET_OP_SUB_GET, NET_OP_SUB_LIST, NET_OP_SUB_DELETE, NET_OP_SUB_FETCH,
    NET_OP_SUB_ACK, NET_OP_SUB_NAK, NET_OP_SUB_PARK, NET_OP_DLQ_LIST, NET_OP_DLQ_REPLAY,
    NET_OP_DLQ_DISCARD, NET_OP_BACKUP, NET_OP_HEALTH, NET_OP_SUB_PROGRESS, NET_OP_CLUSTER_STATUS,
    NET_OP_ACCOUNT_QUERY, NET_OP_TRANSFER_QUERY, NET_OP_ACCOUNT_TRANSFERS,
    NET_OP_TRANSFER_REVERSE, NET_OP_SUB_UPDATE, NET_OP_ACCOUNT_BALANCES, NET_OP_BALANCE_AT,
    NET_OP_ENDPOINT_DISABLE, NET_OP_ENDPOINT_ENABLE, NET_OP_ENDPOINT_GET,
    NET_OP_ENDPOINT_ATTEMPTS_RECORD, NET_OP_ENDPOINT_ATTEMPTS, NET_OP_ENDPOINT_ROTATE_SECRET,
    NET_OP_ENDPOINT_SECRET_GET, NET_OP_ENDPOINT_RECOVER, NET_OP_ENDPOINT_RECOVERED,
    NET_OP_ENDPOINT_CREATE, NET_OP_ENDPOINT_UPDATE, NET_OP_ENDPOINT_DELETE, NET_OP_ENDPOINT_LIST,
    NET_OP_COUNT
} net_op_id;

/* Where an op runs. */
typedef enum net_op_kind {
    NET_KIND_READ,       /* an NNG callback thread, in a read-only transaction */
    NET_KIND_WRITE,      /* a ledger command: consumer and key, the inbox, the writer */
    NET_KIND_SUBSCRIBER, /* a subscriber write: the writer, no consumer or key */
    NET_KIND_CONTROL,    /* on its own, beside reader and writer (backup, health) */
} net_op_kind;

#define NET_OP_FIELDS_MAX 16

/* Read parameters (one set per read op). */
typedef struct net_read {
    uint64_t account_id;
    tally_id128 transfer_id;
    tally_str subject;
    tally_str feature;
    uint64_t after_seq;   /* history: exclusive cursor (0 = from the start/end) */
    uint64_t after_id;    /* account_list: exclusive cursor (0 = from the first account) */
    uint32_t limit;       /* history, account_list and log_read: entries to return */
    bool reverse;
    uint64_t from_seq;    /* log_read */
    tally_str path;       /* backup */
    ledger_query query;   /* account_query, transfer_query, account_transfers */
    ledger_balances_query balances; /* account_balances */
    bool at_time;         /* balance_at: by timestamp_ms (else by seq) */
    int64_t at_ms;
    uint64_t at_seq;
} net_read;

/* Parameters of the subscriber ops (docs/SUBSCRIBERS.md). */
typedef struct net_sub {
    tally_str name;
    sub_start start;
    sub_config config;
    sub_change change;    /* update */
    uint32_t max;         /* fetch */
    bool restart;         /* fetch */
    tally_str instance;   /* fetch: the consumer instance (len 0: none) */
    uint64_t seq;         /* ack (cumulative), nak, park, dlq ops; 0 = none */
    uint64_t done[TALLY_SUB_ACK_SEQS_MAX];
    uint32_t done_count;
    bool has_delay;
    uint32_t delay_ms;    /* nak */
    tally_str text;       /* nak error, park reason */
    uint64_t after_seq;   /* dlq_list */
    uint32_t limit;       /* dlq_list */
    uint32_t partitions;  /* create: 1 = not partitioned */
} net_sub;

/* Parameters of endpoint_attempts_record and endpoint_attempts
 * (net/ops/ops_endpoint.c): the endpoint, its attempts (pointing into the
 * request), how long to keep them; a read's seq and limit. */
typedef struct net_endpoint_args {
    tally_str name;
    ledger_endpoint_attempt attempts[TALLY_ATTEMPTS_RECORD_MAX];
    uint32_t count;
    uint32_t retention_s;
    uint64_t seq;
    uint32_t limit;
} net_endpoint_args;

typedef struct net_op net_op;

/* A decoded request. Large: allocate one per context, reuse it. */
typedef struct net_request {
    const net_op *op;
    int error;              /* TALLY_ok or why the request was refused */
    char error_detail[96];  /* e.g. the field name */
    uint32_t wait_ms;       /* log_read, sub_fetch: long-poll for up to this long */
    uint64_t min_seq;       /* reads: the position to wait for (0: none; docs/CLUSTER.md) */
    tally_str consumer;
    bool has_auth;          /* an `auth` field was sent (a string of 0..256 bytes) */
    tally_str auth;         /* its token: checked, never logged or stored */
    uint32_t write_count;   /* writes: 1, or the ops of a batch */
    ledger_request writes[TALLY_BATCH_OPS_MAX];
    ledger_command chain_members[TALLY_CHAIN_COMMANDS_MAX];
    net_read read;
    net_sub sub;
    net_endpoint_args endpoint; /* endpoint_attempts_record, endpoint_attempts */
    msgpack_unpacked unpacked;
    bool unpacked_live;
} net_request;

/* What a subscriber write did, kept until its reply is sent. */
typedef struct net_sub_result {
    int code;              /* TALLY_ok, a refusal, or a fault */
    bool created;          /* sub_create */
    sub_state state;       /* the cursor after the op */
    uint32_t count;        /* sub_fetch: deliveries */
    sub_delivery deliveries[TALLY_SUB_FETCH_EVENTS_MAX];
    int64_t next_due_ms;   /* sub_fetch: earliest not-yet-due redelivery */
    uint32_t acked;        /* sub_ack */
    uint32_t attempt;      /* sub_nak */
    uint32_t extended;     /* sub_progress */
    int64_t deliver_after_ms;
    uint32_t replaying;    /* dlq_replay */
} net_sub_result;

/* What the writer's apply left for the reply encoder. */
typedef struct net_result {
    ledger_outcome outcomes[TALLY_BATCH_OPS_MAX]; /* writes: one per req->writes[i] */
    int faults[TALLY_BATCH_OPS_MAX];              /* writes: non-zero replaces the outcome */
    net_sub_result sub;                           /* subscriber writes */
    uint32_t attempts_removed;                    /* endpoint_attempts_record: swept */
} net_result;

/* What control ops run against. */
typedef struct net_control_env {
    store *st;              /* NULL: the store is closed (shutting down) */
    const char *backup_dir; /* NULL: anywhere */
    /* The health op's reply from tallyd's health checks (net/metrics/
     * health.h: net_health_reply), with health_ctx; NULL: none. */
    void (*health)(net_out *o, void *health_ctx, store *st);
    void *health_ctx;
    /* cluster_status's reply from the server's state (cluster mode);
     * NULL: tallyd runs single-node. */
    void (*cluster)(net_out *o, void *cluster_ctx);
    void *cluster_ctx;
} net_control_env;

/* Record why req is refused; returns code. */
int net_request_fail(net_request *req, int code, const char *detail);

struct net_op {
    net_op_id id;
    const char *name;
    net_op_kind kind;
    /* What --auth requires of the caller (docs/SECURITY.md). */
    auth_class auth;
    const char *doc;
    net_field fields[NET_OP_FIELDS_MAX]; /* terminated by name == NULL */
    /* Checked fields into req (the ledger command, net_read or net_sub),
     * with the rules the field table cannot say (minimums, choices). args:
     * the op's struct of fields (net/ops/op_fields.h), filled by the
     * decoder; the row's handler takes it typed (net/ops/op_table.c).
     * TALLY_ok or a refusal recorded with net_request_fail. */
    int (*build)(net_request *req, const void *args);
    /* A single write op: its ledger command from a (member) map's struct
     * of fields. NULL for ops that cannot be a chain or batch member. */
    void (*command)(const void *args, ledger_command *c);
    /* READ: pack the reply from the snapshot t at now_ms. */
    void (*read)(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
    /* READ with wait_ms: the head req waits to pass (parked until the log's
     * head seq is above *watermark); false when it answers now. */
    bool (*read_waits)(const net_request *req, uint64_t *watermark);
    /* WRITE, SUBSCRIBER: run in the writer's transaction t. In place, the
     * first fault stops and is returned (the group is then redone with
     * in_place false). Refusals stay in res. */
    int (*apply)(store_txn *t, const net_request *req, int64_t now_ms, bool in_place,
                 net_result *res);
    /* WRITE, SUBSCRIBER: pack the reply after the commit; fault non-zero
     * when the commit failed and replaces every outcome. rt: a read-only
     * snapshot taken after the commit (NULL for WRITE: not needed). */
    void (*reply)(net_out *o, store_txn *rt, const net_request *req, const net_result *res,
                  int fault, int64_t now_ms);
    /* SUBSCRIBER: after the reply-less run, whether to park and run again
     * once the head passes *watermark (sub_fetch that found nothing). */
    bool (*apply_waits)(const net_request *req, const net_result *res, uint64_t *watermark);
    /* CONTROL: run and pack the reply. */
    void (*control)(net_out *o, const net_control_env *env, const net_request *req);
};

extern const net_op net_ops[NET_OP_COUNT];

const net_op *net_op_find(tally_str name);

/* The kind's name in the reference ("read", "write", ...). */
const char *net_op_kind_name(net_op_kind kind);

void net_request_init(net_request *req);
/* Release what the last decode held; safe to call repeatedly. */
void net_request_reset(net_request *req);

/* The envelope field every read takes beside its own: min_seq
 * (docs/CLUSTER.md, "Reads"), for the JSON API's query arguments and the
 * OpenAPI document. */
const net_field *net_read_min_seq_field(void);

/* Decode bytes (one whole msgpack map) into req. Returns TALLY_ok or a
 * request error (also left in req->error with a detail). */
int net_request_decode(net_request *req, const void *bytes, size_t len);

/* ---- derived batch member keys (docs/PROTOCOL.md, "Idempotency") ----
 *
 * A batch member sent over the JSON API without its own key gets one
 * derived from the batch's Idempotency-Key: the byte 0x1f, the SHA-256 of
 * the batch key as 64 lower-case hex digits, '.', and the member's index
 * in decimal. Clients may not send a key that starts with 0x1f, so a
 * derived key never collides with one a client chose, and its length
 * (67-69 bytes) does not depend on the batch key's. */
#define NET_DERIVED_KEY_PREFIX '\x1f'
#define NET_DERIVED_KEY_BYTES_MAX (1 + 64 + 1 + 10)
_Static_assert(NET_DERIVED_KEY_BYTES_MAX <= TALLY_KEY_BYTES_MAX,
               "a derived key fits the key limit");

/* The key of member index of a batch sent with key batch_key (len bytes)
 * into out; its length. */
size_t net_derived_key(const char *batch_key, size_t len, uint32_t index,
                       char out[NET_DERIVED_KEY_BYTES_MAX + 1]);

/* Whether key is one clients may send (its first byte is not 0x1f). */
bool net_key_client_may_send(tally_str key);

/* Whether a write's key, or a batch member's, starts with the reserved
 * byte: allowed only in the JSON API's own requests (their derived keys);
 * from a client, refused with malformed_request and this message. */
bool net_request_has_derived_key(const net_request *req);
#define NET_DERIVED_KEY_REFUSAL "key: a first byte 0x1f is kept for derived batch member keys"

/* Print the op reference (markdown) from the table. */
void net_protocol_reference(FILE *out);

#endif

/*
 * protocol.h — tally's wire protocol: the declarative op table, request
 * decoding and reply encoding (docs/PROTOCOL.md is the contract).
 *
 * One table (net_ops) lists every op with its fields, types, limits and
 * documentation; the decoder checks a request against it before anything
 * else happens, and `tallyd --protocol-reference` prints the same table as
 * the reference section of docs/PROTOCOL.md.
 *
 * A decoded request borrows strings from the message bytes it was decoded
 * from: keep the message until the request is done.
 */
#ifndef TALLY_NET_PROTOCOL_H
#define TALLY_NET_PROTOCOL_H

#include "common/limits.h"
#include "ledger/ledger.h"
#include "log/subscriber.h"

#include <msgpack.h>
#include <stdbool.h>
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
} net_field_type;

typedef struct net_field {
    const char *name;
    net_field_type type;
    bool required;
    uint64_t max;     /* UINT: largest value; STR: bytes; OPS: count */
    const char *doc;
} net_field;

typedef enum net_op_id {
    NET_OP_ACCOUNT_OPEN, NET_OP_TRANSFER, NET_OP_POST, NET_OP_VOID,
    NET_OP_GRANT, NET_OP_EXTEND, NET_OP_REVOKE, NET_OP_CHAIN, NET_OP_BATCH,
    NET_OP_ACCOUNT_GET, NET_OP_ACCOUNT_HISTORY, NET_OP_TRANSFER_GET,
    NET_OP_ENTITLEMENT_GET, NET_OP_ENTITLEMENT_LIST, NET_OP_LOG_READ, NET_OP_STATS,
    NET_OP_SUB_CREATE, NET_OP_SUB_GET, NET_OP_SUB_LIST, NET_OP_SUB_DELETE, NET_OP_SUB_FETCH,
    NET_OP_SUB_ACK, NET_OP_SUB_NAK, NET_OP_SUB_PARK, NET_OP_DLQ_LIST, NET_OP_DLQ_REPLAY,
    NET_OP_DLQ_DISCARD, NET_OP_BACKUP,
    NET_OP_COUNT
} net_op_id;

#define NET_OP_FIELDS_MAX 12

typedef struct net_op {
    net_op_id id;
    const char *name;
    bool write;   /* a ledger command: consumer and key, inbox, writer */
    const char *doc;
    net_field fields[NET_OP_FIELDS_MAX]; /* terminated by name == NULL */
    bool control; /* a subscriber write: run by the writer, no consumer or key */
} net_op;

extern const net_op net_ops[NET_OP_COUNT];

const net_op *net_op_find(tally_str name);

/* Read parameters (one set per read op). */
typedef struct net_read {
    uint64_t account_id;
    tally_id128 transfer_id;
    tally_str subject;
    tally_str feature;
    uint64_t after_seq;   /* history: exclusive cursor (0 = from the start/end) */
    uint32_t limit;       /* history and log_read: entries to return */
    bool reverse;
    uint64_t from_seq;    /* log_read */
    uint32_t wait_ms;     /* log_read long-poll */
    tally_str path;       /* backup */
} net_read;

/* Parameters of the subscriber ops (docs/SUBSCRIBERS.md). */
typedef struct net_sub {
    tally_str name;
    sub_start start;
    sub_config config;
    uint32_t max;         /* fetch */
    uint32_t wait_ms;     /* fetch long-poll */
    bool restart;         /* fetch */
    uint64_t seq;         /* ack (cumulative), nak, park, dlq ops; 0 = none */
    uint64_t done[TALLY_SUB_ACK_SEQS_MAX];
    uint32_t done_count;
    bool has_delay;
    uint32_t delay_ms;    /* nak */
    tally_str text;       /* nak error, park reason */
    uint64_t after_seq;   /* dlq_list */
    uint32_t limit;       /* dlq_list */
} net_sub;

/* A decoded request. Large: allocate one per context, reuse it. */
typedef struct net_request {
    const net_op *op;
    int error;              /* TALLY_ok or why the request was refused */
    char error_detail[96];  /* e.g. the field name */
    tally_str consumer;
    uint32_t write_count;   /* writes: 1, or the ops of a batch */
    ledger_request writes[TALLY_BATCH_OPS_MAX];
    ledger_command chain_members[TALLY_CHAIN_COMMANDS_MAX];
    net_read read;
    net_sub sub;
    msgpack_unpacked unpacked;
    bool unpacked_live;
} net_request;

void net_request_init(net_request *req);
/* Release what the last decode held; safe to call repeatedly. */
void net_request_reset(net_request *req);

/* Decode bytes (one whole msgpack map) into req. Returns TALLY_ok or a
 * request error (also left in req->error with a detail). */
int net_request_decode(net_request *req, const void *bytes, size_t len);

/* Print the op reference (markdown) from the table. */
void net_protocol_reference(FILE *out);

#endif

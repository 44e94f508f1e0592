/*
 * command.h — the commands tally applies, their op table (one row per
 * kind: name, validation, fingerprint, apply, the events it emits), their
 * stateless validation and their idempotency fingerprint.
 *
 * A command is everything that defines one write; the fingerprint (SHA-256
 * of a canonical binary encoding of every defining field) is what the inbox
 * compares when a key is used again. The consumer, the key and the
 * correlation id are not part of it: they name or annotate the command.
 * Strings borrow their storage from the caller.
 */
#ifndef TALLY_LEDGER_COMMAND_H
#define TALLY_LEDGER_COMMAND_H

#include "common/bytes.h"
#include "common/limits.h"
#include "common/log_event.h"
#include "common/sha256.h"

#include <stdbool.h>
#include <stdint.h>

/* The command kinds. The numbers are hashed into fingerprints (stored in
 * the inbox): never renumber. A new kind is appended, LEDGER_COMMAND_KIND_END
 * moved past it, and given its row in the op table (ledger/command.c). */
typedef enum ledger_command_kind {
    LEDGER_ACCOUNT_OPEN = 1,
    LEDGER_TRANSFER = 2,
    LEDGER_POST = 3,
    LEDGER_VOID = 4,
    LEDGER_GRANT = 5,
    LEDGER_EXTEND = 6,
    LEDGER_REVOKE = 7,
    LEDGER_CHAIN = 8,
    LEDGER_WEBHOOK_RECEIVE = 9, /* a verified webhook delivery (net/http/webhooks.c) */
    LEDGER_REVERSE = 10,        /* transfer_reverse */
    LEDGER_ENDPOINT_DISABLE = 11, /* an outbound webhook endpoint (ledger/endpoint.h) */
    LEDGER_ENDPOINT_ENABLE = 12,
    LEDGER_ENDPOINT_ROTATE_SECRET = 13,
    LEDGER_ENDPOINT_RECOVER = 14,   /* resend the events since a time to the endpoint */
    LEDGER_ENDPOINT_RECOVERED = 15, /* ... done (tally-relay) */
    LEDGER_ENDPOINT_CREATE = 16,    /* an endpoint defined in tallyd, at run time */
    LEDGER_ENDPOINT_UPDATE = 17,
    LEDGER_ENDPOINT_DELETE = 18,
} ledger_command_kind;

/* One past the last kind: the op table's length. Outside the enum, so that
 * switches over kinds elsewhere (net/metrics/metrics.c) need no case for
 * it. */
#define LEDGER_COMMAND_KIND_END (LEDGER_ENDPOINT_DELETE + 1)

/* Account flags (bits of ledger_account_open.flags). */
#define LEDGER_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS (1u << 0)
#define LEDGER_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS (1u << 1)
/* Opened with a caller-given creation time (ledger_account_open.
 * timestamp_ms): imported history. Kept on the record. */
#define LEDGER_ACCOUNT_IMPORTED (1u << 3)
#define LEDGER_ACCOUNT_LIMIT_FLAGS 0x3u /* the two balance limits */
#define LEDGER_ACCOUNT_FLAGS_KNOWN 0xbu /* what account_open may set */
/* Set by a pending closing transfer (LEDGER_TRANSFER_CLOSING_*), cleared
 * when it is voided or expires: the account takes no new transfer. Never
 * given by account_open. */
#define LEDGER_ACCOUNT_CLOSED (1u << 2)

/* Transfer flags. */
#define LEDGER_TRANSFER_PENDING (1u << 0)
/* Move at most amount: less, so that the debit account's debits (pending
 * and posted) do not pass its credits posted (balancing_debit), or the
 * credit account's credits theirs (balancing_credit); the transfer
 * records the amount moved. */
#define LEDGER_TRANSFER_BALANCING_DEBIT (1u << 1)
#define LEDGER_TRANSFER_BALANCING_CREDIT (1u << 2)
/* A hold that closes its debit (closing_debit) or credit (closing_credit)
 * account while it is pending or posted; voiding it (or its expiry)
 * reopens the account. */
#define LEDGER_TRANSFER_CLOSING_DEBIT (1u << 3)
#define LEDGER_TRANSFER_CLOSING_CREDIT (1u << 4)
/* Created with a caller-given creation time (ledger_transfer.
 * timestamp_ms): imported history. */
#define LEDGER_TRANSFER_IMPORTED (1u << 5)
#define LEDGER_TRANSFER_FLAGS_KNOWN 0x3fu

/* The caller's own data on an account or a transfer (an invoice, a
 * customer, a tenant): set at creation, never changed, returned by every
 * read and carried in the events; 0 means none. */
typedef struct ledger_user_data {
    tally_id128 user_data_128;
    uint64_t user_data_64;
    uint32_t user_data_32;
} ledger_user_data;

/* Whether any of the three is set. */
static inline bool ledger_user_data_is_set(const ledger_user_data *u)
{
    return !tally_id128_is_zero(&u->user_data_128) || u->user_data_64 != 0 ||
           u->user_data_32 != 0;
}

typedef struct ledger_account_open {
    uint64_t id;      /* != 0 */
    uint32_t ledger;  /* != 0 */
    uint16_t code;    /* != 0 */
    uint16_t flags;   /* LEDGER_ACCOUNT_* */
    ledger_user_data user_data;
    int64_t timestamp_ms; /* imported only: its creation time, Unix ms; else 0 */
} ledger_account_open;

typedef struct ledger_transfer {
    tally_id128 id;   /* != 0, unique across all transfers */
    uint64_t debit_account_id;
    uint64_t credit_account_id;
    int64_t amount;   /* 1 .. TALLY_AMOUNT_MAX */
    uint32_t ledger;  /* != 0, must equal both accounts' ledger */
    uint16_t code;    /* != 0 */
    uint16_t flags;   /* LEDGER_TRANSFER_PENDING makes it a hold */
    uint32_t timeout_s; /* holds only; 0 = never expires */
    ledger_user_data user_data;
    int64_t timestamp_ms; /* imported only: its creation time, Unix ms; else 0 */
} ledger_transfer;

/* transfer_reverse: a new transfer, id, that moves amount of a posted
 * transfer back (from its credit account to its debit account), linked to
 * it (its record's `reverses`). */
typedef struct ledger_reverse {
    tally_id128 id;        /* != 0: the reversal's own transfer id */
    tally_id128 reverses;  /* != 0: the transfer reversed */
    int64_t amount;        /* 0 = all that is not reversed yet (no amount given) */
    bool amount_given;
    uint16_t code;         /* 0 = the reversed transfer's code */
    ledger_user_data user_data;
} ledger_reverse;

/* Post (capture) or void a hold. */
typedef struct ledger_hold_step {
    tally_id128 pending_id;
    int64_t amount;    /* post only: 0 = the full held amount (no amount given) */
    bool amount_given; /* an amount was sent: then 0 is refused, as for transfers */
} ledger_hold_step;

/* grant / extend / revoke. */
typedef struct ledger_entitlement_command {
    tally_str subject;
    tally_str feature;
    int64_t valid_until_ms; /* grant/extend: absolute end, 0 = not given */
    int64_t duration_ms;    /* 0 = not given; grant: end = commit time + duration;
                               extend: end = current end + duration (an expired
                               entitlement: commit time + duration) */
    /* grant with neither: for life. extend needs one of them. */
    bool has_source_order;
    uint64_t source_order;  /* provider's sequence or event time */
    bool has_grant_transfer;
    tally_id128 grant_transfer_id; /* grant: the transfer that paid for it */
} ledger_entitlement_command;

/* webhook_receive: one verified delivery, kept whole in a webhook.received
 * event. The inbox key is (webhook:<source>, event_id); the fingerprint
 * covers the source, the event id and the body, not the signed time (a
 * provider's retry signs the same body anew). */
typedef struct ledger_webhook {
    tally_str source;     /* 1 .. TALLY_WEBHOOK_SOURCE_BYTES_MAX */
    tally_str event_id;   /* 1 .. TALLY_WEBHOOK_EVENT_ID_BYTES_MAX */
    tally_str event_type; /* 0 .. TALLY_WEBHOOK_EVENT_TYPE_BYTES_MAX (0: the scheme gives none) */
    int64_t signed_at_s;  /* the signed timestamp, Unix s; 0: the scheme signs none */
    tally_str body;       /* raw bytes, 0 .. TALLY_WEBHOOK_BODY_BYTES_MAX */
} ledger_webhook;

/* endpoint_disable, endpoint_enable: one endpoint of tally-relay by name,
 * and why (disable only; 0 .. TALLY_ENDPOINT_REASON_BYTES_MAX bytes). */
typedef struct ledger_endpoint {
    tally_str name;
    tally_str reason;
    tally_str secret;   /* endpoint_rotate_secret: [whsec_]<base64 of 24-64 bytes> */
    uint32_t overlap_s; /* ... and how long the one before it signs too */
    int64_t since_ms;   /* endpoint_recover: from the first event committed then */
    uint64_t recover_version; /* endpoint_recovered: the version of the request done */
    /* endpoint_create (secret too) and endpoint_update: the definition;
     * each has_ says the field was given (update: the others are kept) */
    bool has_url, has_types, has_schedule, has_connect_timeout, has_timeout, has_backfill;
    tally_str url;           /* http:// or https:// */
    tally_str types;         /* event-type patterns, space- or comma-separated */
    tally_str schedule;      /* the retry schedule as text ("0 5s 5m ...") */
    tally_str backfill;      /* none, all or a seq (create only) */
    uint32_t connect_timeout_ms, timeout_ms; /* 0: tally-relay's default */
} ledger_endpoint;

typedef struct ledger_command ledger_command;

typedef struct ledger_chain {
    const ledger_command *members;
    uint32_t count; /* 1 .. TALLY_CHAIN_COMMANDS_MAX */
} ledger_chain;

struct ledger_command {
    ledger_command_kind kind;
    union {
        ledger_account_open account_open;
        ledger_transfer transfer;
        ledger_hold_step hold;
        ledger_entitlement_command entitlement;
        ledger_chain chain;
        ledger_webhook webhook;
        ledger_reverse reverse;
        ledger_endpoint endpoint;
    } u;
};

/* At most this many event types per op (an op emits some of them). */
#define LEDGER_OP_EVENT_TYPES_MAX 2

struct ledger_ctx; /* ledger/context.h */

/* One row of the op table: everything ledger/ decides by a command's kind.
 * A chain is the one composite kind: ledger.c runs its members through
 * their rows; as a chain member itself it is refused (chain_must_not_nest),
 * which is what its row's validate and apply say. */
typedef struct ledger_op_row {
    ledger_command_kind kind; /* the row's own index (checked by a test) */
    const char *name;         /* stable: "account_open", "transfer", ... */
    /* The checks that need no store, of one command (a chain member too):
     * TALLY_ok or a validation code. */
    int (*validate)(const ledger_command *cmd);
    /* Feed the fields that define the command into its fingerprint, after
     * its kind byte (ledger_command_fingerprint). */
    void (*fingerprint)(sha256_ctx *h, const ledger_command *cmd);
    /* Apply the validated command in ctx: ok, a business code or a fault. */
    int (*apply)(struct ledger_ctx *ctx, const ledger_command *cmd);
    /* The event types apply may emit (LOG_EVENT_TYPE_NONE after the last);
     * ledger_emit asserts that an op emits no other. */
    log_event_type events[LEDGER_OP_EVENT_TYPES_MAX + 1];
} ledger_op_row;

/* The row of kind, or NULL for a number that is no kind. Static storage. */
const ledger_op_row *ledger_op_of(ledger_command_kind kind);

/* Stable name of a command kind ("account_open", "transfer", ...), or
 * "unknown". */
const char *ledger_command_name(ledger_command_kind kind);

/* Validate what can be validated without the store. Returns TALLY_ok or a
 * validation error (id_must_not_be_zero, amount_must_not_be_zero, ...). For
 * a chain, *failed_index is set to the first invalid member. */
int ledger_command_validate(const ledger_command *cmd, uint32_t *failed_index);

/* Whether cmd is imported history (an account_open or a transfer with
 * the imported flag). */
bool ledger_command_imported(const ledger_command *cmd);

/* The rule of a chain's members and a batch's (TigerBeetle's): all
 * imported or none, as the first. TALLY_ok, imported_event_expected (the
 * first is imported, cmd not) or imported_event_not_expected. */
int ledger_command_import_mix(const ledger_command *first, const ledger_command *cmd);

/* Whether a webhook_receive's strings are within their bounds (an event
 * holds them): checked with the request, before the inbox (ledger.c), so
 * a delivery over them is refused and not stored (value_out_of_range);
 * net/http/webhooks.c checks the same first. */
bool ledger_webhook_fits(const ledger_webhook *w);

/* Fingerprint: SHA-256 of the canonical encoding of cmd. */
void ledger_command_fingerprint(const ledger_command *cmd, uint8_t out[32]);

#endif

/*
 * torture.h — the seeded torture harness (tests/torture/check_torture.c):
 * the commands the clients send, the answers they get, and the auditor
 * that checks a stopped store against what was acknowledged.
 *
 * A command is kept as the fields that define it (torture_write, one per
 * member) and packed into the same request bytes every time it is sent.
 * Its key is "cmd-<index>" under TORTURE_CONSUMER. Answers are recorded
 * as they arrive (torture_answer_record); the auditor (audit.c) works from
 * those answers and the store alone.
 */
#ifndef TALLY_TORTURE_H
#define TALLY_TORTURE_H

#include "common/bytes.h"
#include "ledger/command.h"
#include "log/store.h"

#include <msgpack.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define TORTURE_CONSUMER "torture"
#define TORTURE_KEY_BYTES_MAX 24
#define TORTURE_LEDGER 1
#define TORTURE_CODE 1
/* Account 1 funds the others; 2..TORTURE_ACCOUNTS - 1 may not overdraw
 * (debits_must_not_exceed_credits); the last may not take in more than it
 * paid out (credits_must_not_exceed_debits). */
#define TORTURE_ACCOUNTS 10
#define TORTURE_ENTITLEMENTS 6
#define TORTURE_MEMBERS_MAX 2
/* Commands are kept in chunks that never move. */
#define TORTURE_CHUNK_COMMANDS 4096
#define TORTURE_CHUNKS_MAX 1024
/* Failure messages kept for the report (the count goes on). */
#define TORTURE_FAILURES_KEPT 20
#define TORTURE_FAILURE_BYTES 320

/* One write: a whole single command or one member of a chain. */
typedef struct torture_write {
    uint8_t kind;        /* ledger_command_kind (not LEDGER_CHAIN) */
    uint8_t account_flags; /* account_open */
    uint8_t entitlement; /* grant/extend/revoke: index of subject/feature */
    bool has_grant_transfer;
    bool pending;        /* transfer: a hold */
    uint32_t timeout_s;  /* holds */
    uint64_t debit, credit; /* account_open: debit is the id */
    int64_t amount;      /* transfer/hold; post: 0 = all that is held */
    tally_id128 id;      /* transfer id; post/void: the hold; grant: the paying transfer */
    int64_t valid_until_ms; /* grant (0 = for life), extend */
    uint64_t source_order;  /* grant/extend/revoke: always sent */
    uint64_t user_data_64;  /* transfer: its user data (0: none, not sent) */
    int64_t timestamp_ms;   /* account_open, transfer: imported history at this time (0: live) */
    uint16_t more_flags;    /* transfer: LEDGER_TRANSFER_BALANCING_* (amount: the most to move),
                               CLOSING_* (with pending) */
    tally_id128 reverses;   /* transfer_reverse: the transfer reversed (id: the reversal's,
                               debit and credit: its accounts, the reversed one's swapped) */
} torture_write;

/* What one decided answer said (faults and transport errors are not
 * answers: the client sends again). */
typedef struct torture_answer {
    int code;
    bool replayed;
    uint64_t seq;
    uint32_t events;
    int failed_index;    /* chains; -1 otherwise */
    uint8_t member_codes[TORTURE_MEMBERS_MAX];
} torture_answer;

typedef struct torture_cmd {
    uint32_t index;
    bool chain;
    uint8_t count;       /* members: 1 for a single write */
    bool abandoned;      /* sent once and its reply never awaited */
    torture_write w[TORTURE_MEMBERS_MAX];
    /* under the store's lock */
    uint32_t answers;    /* decided answers received */
    uint32_t fresh;      /* ... of which not replayed */
    torture_answer first;
    /* filled by the audit */
    uint32_t log_events; /* events in the log caused by this key */
    bool applied;        /* its inbox record says ok: its effects are in the store */
    uint64_t applied_seq; /* the first event it caused */
} torture_cmd;

typedef struct torture_store {
    pthread_mutex_t lock;
    torture_cmd *chunks[TORTURE_CHUNKS_MAX];
    uint32_t count;
    uint64_t failures;
    char failure[TORTURE_FAILURES_KEPT][TORTURE_FAILURE_BYTES];
    uint64_t fresh_answers, replayed_answers;
} torture_store;

extern const char *const torture_subjects[TORTURE_ENTITLEMENTS];
extern const char *const torture_features[TORTURE_ENTITLEMENTS];

void torture_store_init(torture_store *s);
void torture_store_free(torture_store *s);
/* A new zeroed command with its index set, or NULL when the store is full. */
torture_cmd *torture_cmd_new(torture_store *s);
/* Command i (i < count). */
torture_cmd *torture_cmd_at(const torture_store *s, uint32_t i);
/* Record a failure (printed at once, kept for the report). */
void torture_fail(torture_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Failures so far. */
uint64_t torture_failures(torture_store *s);

void torture_key(const torture_cmd *c, char out[TORTURE_KEY_BYTES_MAX]);
/* The request of c, the same bytes every time (sb initialised here;
 * the caller destroys it). */
void torture_request_pack(const torture_cmd *c, msgpack_sbuffer *sb);

/* Take a reply to c: returns true when it was a decided answer (recorded
 * and checked against the earlier ones: same outcome, at most one not
 * replayed), false for a fault to retry (overloaded, ...). An answer that
 * can never be right (a refusal of our well-formed request, an undecodable
 * reply, a reused key) is a failure and counts as decided. */
bool torture_answer_record(torture_store *s, torture_cmd *c, const void *reply, size_t len);

/* Events each member causes when the command succeeds. */
uint32_t torture_expected_events(const torture_cmd *c);

/* The auditor: with the store of a stopped tallyd open read-only, count
 * every key's events in the log, check the inbox against the answers, fold
 * the applied commands into the expected state and compare it with every
 * account, transfer and entitlement in the store. Failures go to s. */
void torture_audit(torture_store *s, store *st);

#endif

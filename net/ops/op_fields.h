/*
 * op_fields.h — every op's fields, declared once: one X-macro list per op
 * (or per set of ops with the same fields), each entry
 * F(T, type, name, presence, max, doc). The list makes the op's struct,
 * net_args_<list>, which the decoder fills and the handlers read, and the
 * net_field rows of its row in net/ops/op_table.c, which the decoder
 * checks, the JSON face packs by and `tallyd --protocol-reference` prints
 * (protocol.h, NET_FIELD_MEMBER and NET_FIELD_ROW). A field's wire name is
 * its member's name. Internal to net/ops/.
 */
#ifndef TALLY_NET_OP_FIELDS_H
#define TALLY_NET_OP_FIELDS_H

#include "net/ops/protocol.h"

/* ---- fields several ops share ---- */

#define NET_FIELD_SUBJECT(F, T) \
    F(T, STR, subject, REQUIRED, TALLY_SUBJECT_BYTES_MAX, "who has access (1-128 bytes)")
#define NET_FIELD_FEATURE(F, T) \
    F(T, STR, feature, REQUIRED, TALLY_FEATURE_BYTES_MAX, "what they have access to (1-64 bytes)")
#define NET_FIELD_SOURCE_ORDER(F, T)                                                           \
    F(T, UINT, source_order, OPTIONAL, UINT64_MAX,                                             \
      "provider's ordering value (sequence or event time); a command not newer than the last " \
      "applied is `stale`")
#define NET_FIELD_VALID_UNTIL(F, T) \
    F(T, INT, valid_until_ms, OPTIONAL, 0, "end of validity, Unix ms")
#define NET_FIELD_DURATION(F, T)        \
    F(T, INT, duration_ms, OPTIONAL, 0, \
      "validity from the commit time (grant) or from the current end (extend), ms")
#define NET_FIELD_SUB_NAME(F, T)                               \
    F(T, STR, name, REQUIRED, TALLY_SUBSCRIBER_NAME_BYTES_MAX, \
      "subscriber name: 1-64 bytes of A-Z a-z 0-9 . _ - :")
#define NET_FIELD_SUB_SEQ(F, T, doc) F(T, UINT, seq, REQUIRED, UINT64_MAX, doc)
#define NET_FIELD_PENDING_ID(F, T) \
    F(T, ID128, pending_id, REQUIRED, 16, "the hold's transfer id")

#define NET_FIELD_USER_DATA(F, T)                                                           \
    F(T, ID128, user_data_128, OPTIONAL, 16,                                                \
      "the caller's own 128-bit value (an invoice, a customer), immutable (default 0: none)") \
    F(T, UINT, user_data_64, OPTIONAL, UINT64_MAX,                                          \
      "the caller's own 64-bit value, immutable (default 0: none)")                          \
    F(T, UINT, user_data_32, OPTIONAL, UINT32_MAX,                                          \
      "the caller's own 32-bit value, immutable (default 0: none)")

#define NET_FIELD_TIMESTAMP(F, T)                                                        \
    F(T, INT, timestamp_ms, OPTIONAL, 0,                                                 \
      "imported only: its creation time, Unix ms, after every time the store holds and " \
      "before now")

/* ---- writes ---- */

#define NET_FIELDS_account_open(F, T)                            \
    F(T, UINT, id, REQUIRED, UINT64_MAX, "account id, != 0")     \
    F(T, UINT, ledger, REQUIRED, UINT32_MAX, "ledger, != 0")     \
    F(T, UINT, code, REQUIRED, UINT16_MAX, "account code, != 0") \
    F(T, UINT, flags, OPTIONAL, UINT16_MAX,                      \
      "bit 0 debits_must_not_exceed_credits, bit 1 credits_must_not_exceed_debits, bit 3 "  \
      "imported: created at timestamp_ms (default 0)")                                      \
    NET_FIELD_USER_DATA(F, T)                                                               \
    NET_FIELD_TIMESTAMP(F, T)

#define NET_FIELDS_transfer(F, T)                                                \
    F(T, ID128, id, REQUIRED, 16, "transfer id (16 bytes, != 0), unique")        \
    F(T, UINT, debit_account_id, REQUIRED, UINT64_MAX, "account debited")        \
    F(T, UINT, credit_account_id, REQUIRED, UINT64_MAX, "account credited")      \
    F(T, AMOUNT, amount, REQUIRED, INT64_MAX, "1 .. 2^63-1")                     \
    F(T, UINT, ledger, REQUIRED, UINT32_MAX, "must equal both accounts' ledger") \
    F(T, UINT, code, REQUIRED, UINT16_MAX, "transfer code, != 0")                \
    F(T, UINT, flags, OPTIONAL, UINT16_MAX,                                      \
      "bit 0 pending: a hold; 1 balancing_debit, 2 balancing_credit: move at most "  \
      "what the account has; 3 closing_debit, 4 closing_credit (with pending): "     \
      "close the account; 5 imported: created at timestamp_ms (default 0)")       \
    F(T, UINT, timeout_s, OPTIONAL, TALLY_HOLD_TIMEOUT_S_MAX,                    \
      "holds: expire after this many seconds (0 = never)")                       \
    NET_FIELD_USER_DATA(F, T)                                                    \
    NET_FIELD_TIMESTAMP(F, T)

#define NET_FIELDS_transfer_reverse(F, T)                                                  \
    F(T, ID128, id, REQUIRED, 16, "the reversal's own transfer id (16 bytes, != 0), unique")  \
    F(T, ID128, reverses, REQUIRED, 16, "the posted transfer it reverses")                    \
    F(T, AMOUNT, amount, OPTIONAL, INT64_MAX,                                                \
      "1 .. what is not reversed yet (absent: all of that)")                                 \
    F(T, UINT, code, OPTIONAL, UINT16_MAX, "transfer code (default: the reversed transfer's)") \
    NET_FIELD_USER_DATA(F, T)

#define NET_FIELDS_post(F, T)  \
    NET_FIELD_PENDING_ID(F, T) \
    F(T, AMOUNT, amount, OPTIONAL, INT64_MAX, "amount to post, 1 .. held (absent: all)")

#define NET_FIELDS_void(F, T) NET_FIELD_PENDING_ID(F, T)

#define NET_FIELDS_grant(F, T)   \
    NET_FIELD_SUBJECT(F, T)      \
    NET_FIELD_FEATURE(F, T)      \
    NET_FIELD_VALID_UNTIL(F, T)  \
    NET_FIELD_DURATION(F, T)     \
    NET_FIELD_SOURCE_ORDER(F, T) \
    F(T, ID128, grant_transfer_id, OPTIONAL, 16, "the transfer that paid for it (must exist)")

#define NET_FIELDS_extend(F, T) \
    NET_FIELD_SUBJECT(F, T)     \
    NET_FIELD_FEATURE(F, T)     \
    NET_FIELD_VALID_UNTIL(F, T) \
    NET_FIELD_DURATION(F, T)    \
    NET_FIELD_SOURCE_ORDER(F, T)

#define NET_FIELDS_revoke(F, T) \
    NET_FIELD_SUBJECT(F, T)     \
    NET_FIELD_FEATURE(F, T)     \
    NET_FIELD_SOURCE_ORDER(F, T)

#define NET_FIELD_ENDPOINT_NAME(F, T)                              \
    F(T, STR, endpoint, REQUIRED, TALLY_ENDPOINT_NAME_BYTES_MAX,   \
      "tally-relay's endpoint: 1-58 bytes of A-Z a-z 0-9 . _ -")

#define NET_FIELDS_endpoint_disable(F, T)                                      \
    NET_FIELD_ENDPOINT_NAME(F, T)                                              \
    F(T, STR, reason, OPTIONAL, TALLY_ENDPOINT_REASON_BYTES_MAX,               \
      "why, as the event and endpoint_get say it (0-256 bytes, default none)")

#define NET_FIELDS_endpoint_enable(F, T) NET_FIELD_ENDPOINT_NAME(F, T)

#define NET_FIELDS_endpoint_rotate_secret(F, T)                                             \
    NET_FIELD_ENDPOINT_NAME(F, T)                                                           \
    F(T, STR, secret, REQUIRED, TALLY_ENDPOINT_SECRET_TEXT_BYTES_MAX,                       \
      "the new signing secret: [whsec_]<base64 of 24-64 bytes> (Standard Webhooks)")        \
    F(T, UINT, overlap_s, OPTIONAL, TALLY_ENDPOINT_OVERLAP_S_MAX,                           \
      "how long the secret before it signs too: both signatures are sent (default 86400; "  \
      "0: none)")

#define NET_FIELDS_endpoint_recover(F, T)                                              \
    NET_FIELD_ENDPOINT_NAME(F, T)                                                      \
    F(T, INT, since_ms, REQUIRED, 0,                                                   \
      "resend every event committed at or after this time, Unix ms (1 .. year 9999)")

#define NET_FIELDS_endpoint_recovered(F, T)                                                \
    NET_FIELD_ENDPOINT_NAME(F, T)                                                          \
    F(T, UINT, recover_version, REQUIRED, UINT64_MAX,                                      \
      "the endpoint's version that asked for the recover done (endpoint_get)")

#define NET_FIELDS_ENDPOINT_SETTINGS(F, T)                                                   \
    F(T, STR, types, OPTIONAL, TALLY_ENDPOINT_TYPES_BYTES_MAX,                                \
      "event types it takes, space- or comma-separated: x.y exact, x.* a prefix, * all (at "  \
      "most 16; default \"\": all)")                                                        \
    F(T, STR, retry_schedule, OPTIONAL, TALLY_ENDPOINT_SCHEDULE_BYTES_MAX,                    \
      "the delay before each attempt, the first 0: 0 or a number with ms, s, m, h or d, at "  \
      "most 1d each, at most 64 (default \"\": tally-relay's, 12 attempts over 2.8 days)")  \
    F(T, UINT, connect_timeout_ms, OPTIONAL, TALLY_ENDPOINT_TIMEOUT_MS_MAX,                   \
      "the connect timeout (default 0: tally-relay's, 5000)")                                 \
    F(T, UINT, timeout_ms, OPTIONAL, TALLY_ENDPOINT_TIMEOUT_MS_MAX,                           \
      "the whole request's timeout (default 0: tally-relay's, 10000)")

#define NET_FIELDS_endpoint_create(F, T)                                                     \
    NET_FIELD_ENDPOINT_NAME(F, T)                                                            \
    F(T, STR, url, REQUIRED, TALLY_ENDPOINT_URL_BYTES_MAX,                                    \
      "where events are POSTed: http:// or https://")                                        \
    F(T, STR, secret, REQUIRED, TALLY_ENDPOINT_SECRET_TEXT_BYTES_MAX,                         \
      "its signing secret: [whsec_]<base64 of 24-64 bytes> (Standard Webhooks)")            \
    NET_FIELDS_ENDPOINT_SETTINGS(F, T)                                                       \
    F(T, STR, backfill, OPTIONAL, TALLY_ENDPOINT_BACKFILL_BYTES_MAX,                          \
      "where its subscriber starts: none (the default: new events), all, or a seq")

#define NET_FIELDS_endpoint_update(F, T)                                                     \
    NET_FIELD_ENDPOINT_NAME(F, T)                                                            \
    F(T, STR, url, OPTIONAL, TALLY_ENDPOINT_URL_BYTES_MAX,                                    \
      "where events are POSTed: http:// or https://")                                        \
    NET_FIELDS_ENDPOINT_SETTINGS(F, T)

#define NET_FIELDS_endpoint_delete(F, T) NET_FIELD_ENDPOINT_NAME(F, T)

#define NET_FIELDS_endpoint_attempts_record(F, T)                                             \
    NET_FIELD_ENDPOINT_NAME(F, T)                                                             \
    F(T, MAPS, attempts, REQUIRED, TALLY_ATTEMPTS_RECORD_MAX,                                  \
      "attempt maps: seq, attempt, time_ms, status (0: no answer), latency_ms, error, "       \
      "response (0-256 bytes each)")                                                          \
    F(T, UINT, retention_s, OPTIONAL, TALLY_ATTEMPT_RETENTION_S_MAX,                          \
      "remove the endpoint's attempts older than this, a bounded number per op (default "     \
      "604800, 7 days)")

#define NET_FIELDS_endpoint_attempts(F, T)                                         \
    NET_FIELD_ENDPOINT_NAME(F, T)                                                  \
    F(T, UINT, seq, OPTIONAL, UINT64_MAX, "only the attempts of this event")       \
    F(T, UINT, limit, OPTIONAL, TALLY_ATTEMPTS_READ_MAX, "attempts, newest first (default 100)")

#define NET_FIELDS_chain(F, T)                         \
    F(T, OPS, ops, REQUIRED, TALLY_CHAIN_COMMANDS_MAX, \
      "member op maps: `op` and its fields, no `key`")

#define NET_FIELDS_batch(F, T)                    \
    F(T, OPS, ops, REQUIRED, TALLY_BATCH_OPS_MAX, \
      "member op maps: `op`, `key`, optional `correlation`, and the op's fields")

/* ---- reads ---- */

#define NET_FIELDS_endpoint_get(F, T) NET_FIELD_ENDPOINT_NAME(F, T)

#define NET_FIELDS_account_get(F, T) F(T, UINT, id, REQUIRED, UINT64_MAX, "account id")

#define NET_FIELDS_account_history(F, T)                                            \
    F(T, UINT, id, REQUIRED, UINT64_MAX, "account id")                              \
    F(T, UINT, after_seq, OPTIONAL, UINT64_MAX,                                     \
      "page cursor: entries after (or with `reverse`, before) this seq")            \
    F(T, UINT, limit, OPTIONAL, TALLY_HISTORY_ENTRIES_MAX, "entries (default 100)") \
    F(T, BOOL, reverse, OPTIONAL, 0, "newest first (default false)")

#define NET_FIELDS_account_list(F, T)                                                             \
    F(T, UINT, after_id, OPTIONAL, UINT64_MAX, "page cursor: accounts after this id (default 0)") \
    F(T, UINT, limit, OPTIONAL, TALLY_ACCOUNT_LIST_ENTRIES_MAX, "entries, >= 1 (default 100)")

/* The filters and the page of account_query, transfer_query and
 * account_transfers (ledger/query.h). */
#define NET_FIELD_QUERY(F, T)                                                                    \
    F(T, UINT, code, OPTIONAL, UINT16_MAX, "only this code (default 0: any)")                    \
    F(T, ID128, user_data_128, OPTIONAL, 16, "only this user_data_128 (default 0: any)")         \
    F(T, UINT, user_data_64, OPTIONAL, UINT64_MAX, "only this user_data_64 (default 0: any)")    \
    F(T, UINT, user_data_32, OPTIONAL, UINT32_MAX, "only this user_data_32 (default 0: any)")    \
    F(T, INT, timestamp_min_ms, OPTIONAL, 0,                                                     \
      "created at or after this Unix ms (default 0: no bound)")                                  \
    F(T, INT, timestamp_max_ms, OPTIONAL, 0,                                                     \
      "created at or before this Unix ms (default 0: no bound)")                                 \
    F(T, UINT, limit, OPTIONAL, TALLY_QUERY_ENTRIES_MAX, "records, >= 1 (default 100)")          \
    F(T, BOOL, reversed, OPTIONAL, 0, "newest first (default false)")                            \
    F(T, ID128, cursor, OPTIONAL, 16,                                                            \
      "page cursor: the `next` of the page before, with the same filters")

#define NET_FIELDS_query(F, T)                                              \
    F(T, UINT, ledger, OPTIONAL, UINT32_MAX, "only this ledger (default 0: any)") \
    NET_FIELD_QUERY(F, T)

#define NET_FIELDS_account_transfers(F, T)                                         \
    F(T, UINT, account_id, REQUIRED, UINT64_MAX, "the account, != 0")              \
    F(T, BOOL, debits, OPTIONAL, 0, "transfers that debit it (default true)")      \
    F(T, BOOL, credits, OPTIONAL, 0, "transfers that credit it (default true)")    \
    NET_FIELD_QUERY(F, T)

#define NET_FIELDS_account_balances(F, T)                                                  \
    F(T, UINT, account_id, REQUIRED, UINT64_MAX, "the account, != 0")                       \
    F(T, INT, timestamp_min_ms, OPTIONAL, 0, "entries at or after this Unix ms (default 0: no bound)") \
    F(T, INT, timestamp_max_ms, OPTIONAL, 0, "entries at or before this Unix ms (default 0: no bound)") \
    F(T, UINT, seq_min, OPTIONAL, UINT64_MAX, "entries at or after this seq (default 0: no bound)") \
    F(T, UINT, seq_max, OPTIONAL, UINT64_MAX, "entries at or before this seq (default 0: no bound)") \
    F(T, UINT, limit, OPTIONAL, TALLY_HISTORY_ENTRIES_MAX, "entries, >= 1 (default 100)")  \
    F(T, BOOL, reversed, OPTIONAL, 0, "newest first (default false)")                      \
    F(T, UINT, after_seq, OPTIONAL, UINT64_MAX,                                             \
      "page cursor: the `next` of the page before, with the same bounds")

#define NET_FIELDS_balance_at(F, T)                                               \
    F(T, UINT, account_id, REQUIRED, UINT64_MAX, "the account, != 0")             \
    F(T, INT, timestamp_ms, OPTIONAL, 0,                                          \
      "the balances after every entry at or before this Unix ms (this or seq)")   \
    F(T, UINT, seq, OPTIONAL, UINT64_MAX,                                         \
      "the balances after every entry at or before this seq (this or timestamp_ms)")

#define NET_FIELDS_transfer_get(F, T) F(T, ID128, id, REQUIRED, 16, "transfer id")

#define NET_FIELDS_entitlement_get(F, T) \
    NET_FIELD_SUBJECT(F, T)              \
    NET_FIELD_FEATURE(F, T)

#define NET_FIELDS_entitlement_list(F, T) NET_FIELD_SUBJECT(F, T)

#define NET_FIELDS_log_read(F, T)                                                      \
    F(T, UINT, from_seq, OPTIONAL, UINT64_MAX, "first seq wanted (default 1)")         \
    F(T, UINT, limit, OPTIONAL, TALLY_LOG_READ_EVENTS_MAX,                             \
      "events (default 100); a page also holds at most 2 MiB of events, at least one") \
    F(T, UINT, wait_ms, OPTIONAL, TALLY_LOG_WAIT_MS_MAX,                               \
      "if none yet, wait up to this long for one (default 0)")

/* ---- subscribers (sub_named: sub_get and sub_delete) ---- */

/* The settings sub_create takes and sub_update changes. */
#define NET_FIELD_SUB_SETTINGS(F, T)                                                        \
    F(T, UINT, max_deliver, OPTIONAL, TALLY_SUB_MAX_DELIVER_MAX,                            \
      "deliveries of an event before it is parked, >= 1 (default 5)")                       \
    F(T, UINT, ack_wait_ms, OPTIONAL, TALLY_SUB_ACK_WAIT_MS_MAX,                            \
      "the lease of a delivery: due again unless acked, naked or extended (sub_progress) " \
      "within it, >= 100 (default 30000)")                                                  \
    F(T, UINTS, backoff_ms, OPTIONAL, TALLY_SUB_BACKOFF_STEPS_MAX,                          \
      "redelivery delay after a failure (a nak without delay_ms) of the n-th delivery "   \
      "(the last repeats); each <= 86400000")                                               \
    F(T, UINT, max_ack_pending, OPTIONAL, TALLY_SUB_MAX_ACK_PENDING_MAX,                    \
      "events in flight at most, >= 1 (default 1000)")                                      \
    F(T, STR, filter_types, OPTIONAL,                                                       \
      TALLY_SUB_FILTER_TYPES_MAX * (TALLY_SUB_FILTER_TYPE_BYTES_MAX + 1),                   \
      "hand out only events of these types, comma-separated (at most 16; \"x.*\" every "   \
      "type starting x., \"*\" any; \"\": any)")                                         \
    F(T, STR, filter_kinds, OPTIONAL, 64,                                                   \
      "only events about these entity kinds, comma-separated: account, transfer, "         \
      "entitlement, dead_letter, webhook, subscriber (\"\": any)")                           \
    F(T, STR, filter_subject, OPTIONAL, TALLY_SUB_FILTER_GLOB_BYTES_MAX,                    \
      "only events whose entitlement subject matches this glob (* ? [..]; \"\": any)")       \
    F(T, UINT, inactive_expiry_ms, OPTIONAL, TALLY_SUB_INACTIVE_EXPIRY_MS_MAX,              \
      "remove the subscriber after this long without a fetch, ack or park, with a "        \
      "subscriber.expired event; >= 1000 (default 0: never)")                               \
    F(T, STR, contact, OPTIONAL, TALLY_SUB_OWNER_BYTES_MAX,                                 \
      "who owns its dead letters (printable ASCII without \" and \\; \"\": none)")          \
    F(T, STR, alert_route, OPTIONAL, TALLY_SUB_OWNER_BYTES_MAX,                             \
      "where its dead-letter alerts go: a label of its dead-letter metrics (\"\": none)")

#define NET_FIELDS_sub_create(F, T)                                                         \
    NET_FIELD_SUB_NAME(F, T)                                                                \
    F(T, STR, start, OPTIONAL, 16, "`beginning` (default) or `now`")                        \
    F(T, UINT, from_seq, OPTIONAL, UINT64_MAX, "start at this seq (1 .. head + 1)")         \
    F(T, INT, from_time_ms, OPTIONAL, 0,                                                    \
      "start at the first event committed at or after this Unix ms")                        \
    NET_FIELD_SUB_SETTINGS(F, T)                                                            \
    F(T, UINT, partitions, OPTIONAL, TALLY_SUB_PARTITIONS_MAX,                              \
      "ordered partitions by entity, each held by one instance at a time, 1-64 "           \
      "(default 1: none; fixed once created)")

#define NET_FIELDS_sub_update(F, T) \
    NET_FIELD_SUB_NAME(F, T)        \
    NET_FIELD_SUB_SETTINGS(F, T)

#define NET_FIELDS_sub_named(F, T) NET_FIELD_SUB_NAME(F, T)

#define NET_FIELDS_sub_fetch(F, T)                                                           \
    NET_FIELD_SUB_NAME(F, T)                                                                 \
    F(T, UINT, max, OPTIONAL, TALLY_SUB_FETCH_EVENTS_MAX,                                    \
      "events, >= 1 (default 100); at most 2 MiB of events, at least one")                   \
    F(T, UINT, wait_ms, OPTIONAL, TALLY_LOG_WAIT_MS_MAX,                                     \
      "if none is due, wait up to this long (default 0)")                                    \
    F(T, BOOL, restart, OPTIONAL, 0,                                                         \
      "the in-flight events of `instance` (without one: every in-flight event) are due now " \
      "(a consumer's first fetch; default false)")                                           \
    F(T, STR, instance, OPTIONAL, TALLY_SUB_INSTANCE_BYTES_MAX,                              \
      "this consumer instance's id, 1-64 bytes of A-Z a-z 0-9 . _ -: what it is handed is "  \
      "leased to it until acked or the ack wait passes (default: none)")

#define NET_FIELDS_sub_ack(F, T)                                                  \
    NET_FIELD_SUB_NAME(F, T)                                                      \
    F(T, UINT, seq, OPTIONAL, UINT64_MAX, "every event <= seq is done (<= head)") \
    F(T, UINTS, done, OPTIONAL, TALLY_SUB_ACK_SEQS_MAX, "these delivered seqs are done")

#define NET_FIELDS_sub_nak(F, T)                               \
    NET_FIELD_SUB_NAME(F, T)                                   \
    NET_FIELD_SUB_SEQ(F, T, "the in-flight event")             \
    F(T, UINT, delay_ms, OPTIONAL, TALLY_SUB_ACK_WAIT_MS_MAX,  \
      "due again after this long (default: the backoff rule)") \
    F(T, STR, reason, OPTIONAL, TALLY_SUB_ERROR_BYTES_MAX,                                    \
      "why it failed; kept as the event's last error (sub_get, the dead letter)")              \
    F(T, STR, error, OPTIONAL, TALLY_SUB_ERROR_BYTES_MAX, "the same as reason (its older name)")

#define NET_FIELDS_sub_progress(F, T)                                                      \
    NET_FIELD_SUB_NAME(F, T)                                                               \
    F(T, UINTS, seqs, REQUIRED, TALLY_SUB_ACK_SEQS_MAX, "the in-flight events still at work") \
    F(T, STR, instance, OPTIONAL, TALLY_SUB_INSTANCE_BYTES_MAX,                            \
      "extend only what this instance holds (default: whoever holds it)")

#define NET_FIELDS_sub_park(F, T)                  \
    NET_FIELD_SUB_NAME(F, T)                       \
    NET_FIELD_SUB_SEQ(F, T, "the in-flight event") \
    F(T, STR, reason, OPTIONAL, TALLY_SUB_ERROR_BYTES_MAX, "why")

#define NET_FIELDS_dlq_list(F, T)                                                                  \
    NET_FIELD_SUB_NAME(F, T)                                                                       \
    F(T, UINT, after_seq, OPTIONAL, UINT64_MAX, "page cursor: entries after this seq (default 0)") \
    F(T, UINT, limit, OPTIONAL, TALLY_DLQ_LIST_ENTRIES_MAX, "entries, >= 1 (default 100)")

#define NET_FIELDS_dlq_replay(F, T) \
    NET_FIELD_SUB_NAME(F, T)        \
    F(T, UINT, seq, OPTIONAL, UINT64_MAX, "this dead letter (default: all)")

#define NET_FIELDS_dlq_discard(F, T) \
    NET_FIELD_SUB_NAME(F, T)         \
    NET_FIELD_SUB_SEQ(F, T, "the dead letter")

/* ---- control ---- */

#define NET_FIELDS_backup(F, T)                                                            \
    F(T, STR, path, REQUIRED, TALLY_PATH_BYTES_MAX - 1,                                    \
      "absolute path of a directory that does not exist yet (below tallyd's --backup-dir " \
      "when set)")

/* Every list above (ops without fields have none). */
#define NET_FIELD_LISTS(X)                                                            \
    X(account_open) X(transfer) X(post) X(void) X(grant) X(extend) X(revoke) X(chain) \
    X(transfer_reverse)                                                               \
    X(batch) X(account_get) X(account_history) X(account_list) X(transfer_get)        \
    X(query) X(account_transfers) X(account_balances) X(balance_at)                   \
    X(entitlement_get) X(entitlement_list) X(log_read) X(sub_create) X(sub_update) X(sub_named) \
    X(sub_fetch) X(sub_ack) X(sub_nak) X(sub_progress) X(sub_park) X(dlq_list) X(dlq_replay)          \
    X(dlq_discard) X(backup) X(endpoint_disable) X(endpoint_enable) X(endpoint_get)           \
    X(endpoint_rotate_secret)                                                                   \
    X(endpoint_recover) X(endpoint_recovered) \
    X(endpoint_attempts_record) X(endpoint_attempts) X(endpoint_create) X(endpoint_update) \
    X(endpoint_delete)

#define NET_ARGS_STRUCT(list)                                 \
    typedef struct net_args_##list {                          \
        NET_FIELDS_##list(NET_FIELD_MEMBER, net_args_##list) \
    } net_args_##list;
NET_FIELD_LISTS(NET_ARGS_STRUCT)
#undef NET_ARGS_STRUCT

/* Room for any op's struct: what the decoder fills before the builder. */
#define NET_ARGS_UNION_MEMBER(list) net_args_##list list##_args;
typedef union net_args {
    NET_FIELD_LISTS(NET_ARGS_UNION_MEMBER)
} net_args;
#undef NET_ARGS_UNION_MEMBER

#endif

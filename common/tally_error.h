/*
 * tally_error.h — the one error enum of tally (installed under this name;
 * in-tree code includes it as "common/error.h").
 *
 * 0 is success. Every other value has a stable lower-case name, returned by
 * tally_strerror(); the name is also the code on the wire and in the CLI's
 * JSON, so names are never renamed or reused: new codes are appended at the
 * end of their group with a new number. LMDB, NNG and msgpack codes are
 * translated at the module edge into these and never leak.
 *
 * Classes (tally_error_class):
 *   - business rejections: deterministic given the store and the command;
 *     stored in the inbox and replayed for a retried key;
 *   - invalid commands: deterministic given the command alone; also stored;
 *   - faults (storage_full, io_error, internal, ...): not stored, so the same
 *     key may be retried once the fault is gone.
 */
#ifndef TALLY_ERROR_H
#define TALLY_ERROR_H

#include <stdbool.h>

/* X(enum suffix, number, class) — class: B business, V validation,
 * R invalid request (consumer/key unusable, not stored), F fault. */
#define TALLY_ERRORS(X)                                                        \
    X(ok, 0, B)                                                                \
    /* faults: never stored in the inbox */                                    \
    X(storage_full, 1, F)                                                      \
    X(io_error, 2, F)                                                          \
    X(internal, 3, F)                                                          \
    X(out_of_memory, 4, F)                                                     \
    X(transaction_full, 5, F)                                                  \
    X(corrupt_record, 6, F)                                                    \
    X(store_locked, 7, F)                                                      \
    X(store_version_mismatch, 8, F)                                            \
    X(not_found, 9, F)                                                         \
    X(invalid_argument, 10, F)                                                 \
    X(read_only, 11, F)                                                        \
    /* idempotency */                                                          \
    X(idempotency_key_reused, 20, R)                                           \
    X(consumer_must_not_be_empty, 21, R)                                       \
    X(consumer_too_long, 22, R)                                                \
    X(key_must_not_be_empty, 23, R)                                            \
    X(key_too_long, 24, R)                                                     \
    X(correlation_too_long, 25, R)                                             \
    X(key_expired, 26, R)                                                      \
    X(consumer_reserved, 27, R)                                                \
    /* shared by accounts and transfers */                                     \
    X(exists, 30, B)                                                           \
    X(exists_with_different_ledger, 31, B)                                     \
    X(exists_with_different_code, 32, B)                                       \
    X(exists_with_different_flags, 33, B)                                      \
    X(id_must_not_be_zero, 34, V)                                              \
    X(ledger_must_not_be_zero, 35, V)                                          \
    X(code_must_not_be_zero, 36, V)                                            \
    X(reserved_flag, 37, V)                                                    \
    X(exists_with_different_user_data_128, 38, B)                              \
    X(exists_with_different_user_data_64, 39, B)                               \
    X(exists_with_different_user_data_32, 41, B)                               \
    /* accounts */                                                             \
    X(flags_are_mutually_exclusive, 40, V)                                     \
    /* transfers */                                                            \
    X(debit_account_id_must_not_be_zero, 50, V)                                \
    X(credit_account_id_must_not_be_zero, 51, V)                               \
    X(accounts_must_be_different, 52, V)                                       \
    X(amount_must_not_be_zero, 53, V)                                          \
    X(amount_must_not_be_negative, 54, V)                                      \
    X(amount_overflows, 55, V)                                                 \
    X(timeout_reserved_for_pending_transfer, 56, V)                            \
    X(timeout_too_large, 57, V)                                                \
    X(debit_account_not_found, 58, B)                                          \
    X(credit_account_not_found, 59, B)                                         \
    X(accounts_must_have_the_same_ledger, 60, B)                               \
    X(transfer_must_have_the_same_ledger_as_accounts, 61, B)                   \
    X(exists_with_different_debit_account_id, 62, B)                           \
    X(exists_with_different_credit_account_id, 63, B)                          \
    X(exists_with_different_amount, 64, B)                                     \
    X(exists_with_different_timeout, 65, B)                                    \
    X(overflows_debits_pending, 66, B)                                         \
    X(overflows_credits_pending, 67, B)                                        \
    X(overflows_debits_posted, 68, B)                                          \
    X(overflows_credits_posted, 69, B)                                         \
    X(overflows_debits, 70, B)                                                 \
    X(overflows_credits, 71, B)                                                \
    X(exceeds_credits, 72, B)                                                  \
    X(exceeds_debits, 73, B)                                                   \
    X(id_already_failed, 74, B)                                                \
    /* reversals (transfer_reverse) */                                         \
    X(reversed_transfer_not_found, 75, B)                                      \
    X(transfer_not_reversible, 76, B)                                          \
    X(exceeds_unreversed_amount, 77, B)                                        \
    X(exists_with_different_reverses, 78, B)                                   \
    X(reverses_must_not_be_zero, 79, V)                                        \
    /* holds (pending transfers) */                                            \
    X(pending_transfer_not_found, 80, B)                                       \
    X(pending_transfer_not_pending, 81, B)                                     \
    X(pending_transfer_already_posted, 82, B)                                  \
    X(pending_transfer_already_voided, 83, B)                                  \
    X(pending_transfer_expired, 84, B)                                         \
    X(exceeds_pending_transfer_amount, 85, B)                                  \
    /* balancing and closing transfers */                                      \
    X(closing_transfer_must_be_pending, 86, V)                                 \
    X(debit_account_already_closed, 87, B)                                     \
    X(credit_account_already_closed, 88, B)                                    \
    /* entitlements */                                                         \
    X(subject_must_not_be_empty, 90, V)                                        \
    X(subject_too_long, 91, V)                                                 \
    X(feature_must_not_be_empty, 92, V)                                        \
    X(feature_too_long, 93, V)                                                 \
    X(time_out_of_range, 94, V)                                                \
    X(duration_out_of_range, 95, V)                                            \
    X(until_and_duration_are_mutually_exclusive, 96, V)                        \
    X(valid_until_must_be_in_future, 97, B)                                    \
    X(invalid_endpoint_name, 190, V)                                           \
    X(invalid_secret, 191, V)                                                  \
    X(endpoint_exists, 192, B)                                                 \
    X(endpoint_not_found, 193, B)                                              \
    X(invalid_endpoint_url, 194, V)                                            \
    X(too_many_endpoints, 195, B)                                              \
    X(entitlement_not_found, 98, B)                                            \
    X(entitlement_already_active, 99, B)                                       \
    X(entitlement_revoked, 100, B)                                             \
    X(entitlement_already_revoked, 101, B)                                     \
    X(entitlement_is_lifetime, 102, B)                                         \
    X(grant_transfer_not_found, 105, B)                                        \
    X(extension_must_move_forward, 103, B)                                     \
    X(stale, 104, B)                                                           \
    /* atomic chains */                                                        \
    X(linked_operation_failed, 110, B)                                         \
    X(chain_must_not_be_empty, 111, V)                                         \
    X(chain_too_long, 112, V)                                                  \
    X(chain_must_not_nest, 113, V)                                             \
    X(unknown_command, 114, V)                                                 \
    X(field_not_allowed_for_command, 115, V)                                   \
    /* wire requests (net/): never stored */                                   \
    X(malformed_request, 120, R)                                               \
    X(request_too_large, 121, R)                                               \
    X(unsupported_version, 122, R)                                             \
    X(unknown_op, 123, R)                                                      \
    X(unknown_field, 124, R)                                                   \
    X(duplicate_field, 125, R)                                                 \
    X(missing_field, 126, R)                                                   \
    X(wrong_type, 127, R)                                                      \
    X(value_out_of_range, 128, R)                                              \
    X(too_many_operations, 129, R)                                             \
    X(not_in_cluster_mode, 130, R)                                             \
    /* subscribers (log/subscriber.c): not stored, no idempotency key */       \
    X(invalid_subscriber_name, 150, R)                                         \
    X(subscriber_not_found, 151, R)                                            \
    X(subscriber_exists_with_different_config, 152, R)                         \
    X(too_many_subscribers, 153, R)                                            \
    X(start_positions_are_mutually_exclusive, 154, R)                          \
    X(seq_beyond_head, 155, R)                                                 \
    X(seq_not_delivered, 156, R)                                               \
    X(seq_not_in_flight, 157, R)                                               \
    X(dead_letter_not_found, 158, R)                                           \
    /* backup (tally backup DEST) */                                           \
    X(backup_destination_exists, 160, R)                                       \
    X(backup_destination_invalid, 161, R)                                      \
    /* imported history (the imported flag) */                                 \
    X(timestamp_must_be_zero, 180, V)                                          \
    X(imported_event_timestamp_out_of_range, 181, V)                           \
    X(imported_event_timeout_must_be_zero, 182, V)                             \
    X(imported_event_expected, 183, V)                                         \
    X(imported_event_not_expected, 184, V)                                     \
    X(imported_event_timestamp_must_not_advance, 185, B)                       \
    X(imported_event_timestamp_must_not_regress, 186, B)                       \
    X(imported_event_timestamp_must_postdate_debit_account, 187, B)            \
    X(imported_event_timestamp_must_postdate_credit_account, 188, B)           \
    /* auth (tallyd --auth): refused before anything is stored */             \
    X(unauthenticated, 170, R)                                                 \
    X(forbidden, 171, R)                                                       \
    /* server and client conditions: never stored, retry later */              \
    X(overloaded, 140, F)                                                      \
    X(shutting_down, 141, F)                                                   \
    X(timed_out, 142, F)                                                       \
    X(unreachable, 143, F)                                                     \
    X(cluster_unavailable, 144, F)                                             \
    X(not_caught_up, 145, F)                                                   \
    X(cluster_diverged, 146, F)

typedef enum tally_error {
#define TALLY_ERROR_ENUM(name, number, cls) TALLY_##name = number,
    TALLY_ERRORS(TALLY_ERROR_ENUM)
#undef TALLY_ERROR_ENUM
} tally_error;

typedef enum tally_error_class {
    TALLY_CLASS_BUSINESS,   /* decided against the store; stored and replayed */
    TALLY_CLASS_VALIDATION, /* invalid command; answered, not stored: the key stays free */
    TALLY_CLASS_REQUEST,    /* refused request; not stored */
    TALLY_CLASS_FAULT,      /* not stored; the key may be retried */
} tally_error_class;

/* Stable lower-case name of code ("ok", "exceeds_credits", ...), or
 * "unknown_error" for a value outside the enum. Never NULL; static storage. */
const char *tally_strerror(int code);

/* Class of a code; unknown values are faults. */
tally_error_class tally_error_class_of(int code);

/* true when the outcome of a command with this code is stored in the inbox
 * (ok and business rejections). */
bool tally_error_is_stored(int code);

/* true when a command was judged and rejected or applied: ok, a business
 * rejection or an invalid command (class V, answered but not stored). An
 * inbox record written by an older tallyd may hold a V code. */
bool tally_error_is_decided(int code);

/* Look up a code by its name; returns -1 when the name is unknown. */
int tally_error_from_name(const char *name);

#endif

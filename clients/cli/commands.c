/*
 * commands.c — the tables of `tally`: every command with its arguments and
 * options (cli_option rows, checked by parse.c and explained by help.c) and
 * its run function.
 */
#include "config.h"

#include "clients/cli/tally_cli.h"

/* ---- the option tables ---- */

#define OPT_END {NULL}
#define OPT_KEY                                                                                    \
    {"--key", SLOT_KEY, CLI_TEXT, 1, TALLY_KEY_BYTES_MAX, false, "K",                              \
     "idempotency key, 1-128 bytes (default: a new UUIDv7, printed)"}
#define OPT_LEDGER                                                                                 \
    {"--ledger", SLOT_LEDGER, CLI_UINT, 1, UINT32_MAX, false, "N", "ledger, 1..2^32-1 (default 1)"}
#define OPT_CODE(what)                                                                             \
    {"--code", SLOT_CODE, CLI_UINT, 1, UINT16_MAX, false, "N", what " code, 1..65535 (default 1)"}
#define OPT_ORDER                                                                                  \
    {"--source-order", SLOT_SOURCE_ORDER, CLI_UINT, 0, UINT64_MAX, false, "N",                     \
     "provider's ordering value; a command not newer than the last applied is `stale`"}
#define OPT_UNTIL(what)                                                                            \
    {"--until", SLOT_UNTIL, CLI_TIME, 0, 0, false, "RFC3339",                                      \
     what ", e.g. 2027-01-01T00:00:00Z or 2027-01-01T09:00:00+02:00"}
#define OPT_FOR(what)                                                                              \
    {"--for", SLOT_FOR, CLI_DURATION, 0, 0, false, "DURATION",                                     \
     what ", e.g. 30d, 12h, 90m, 45s, 1w, 1d12h (at most 100 years)"}
#define OPT_USER_DATA(what)                                                                        \
    {"--user-data-128", SLOT_USER_DATA_128, CLI_TID, 0, 0, false, "HEX",                           \
     what "'s own 128-bit value: 32 hex digits (dashes allowed) or a decimal number"},             \
    {"--user-data-64", SLOT_USER_DATA_64, CLI_UINT, 0, UINT64_MAX, false, "N",                     \
     what "'s own 64-bit value"},                                                                   \
    {"--user-data-32", SLOT_USER_DATA_32, CLI_UINT, 0, UINT32_MAX, false, "N",                     \
     what "'s own 32-bit value"}
#define ARG_ACCOUNT                                                                                \
    {"ID", SLOT_ACCOUNT, CLI_UINT, 1, UINT64_MAX, true, NULL, "account id, 1..2^64-1"}
#define ARG_TID {"TID", SLOT_TID, CLI_TID, 0, 0, true, NULL, "transfer id of the hold"}
#define ARG_SUBJECT                                                                                \
    {"SUBJECT", SLOT_SUBJECT, CLI_TEXT, 1, TALLY_SUBJECT_BYTES_MAX, true, NULL,                    \
     "who has access, 1-128 bytes"}
#define ARG_FEATURE                                                                                \
    {"FEATURE", SLOT_FEATURE, CLI_TEXT, 1, TALLY_FEATURE_BYTES_MAX, true, NULL,                    \
     "what they have access to, 1-64 bytes"}

const cli_option cli_global_options[] = {
    {"--url", SLOT_URL, CLI_TEXT, 1, CLI_URL_BYTES_MAX, false, "URL",
     "tallyd's NNG address; a comma-separated list of a cluster's nodes fails over (default "
     "$TALLY_URL, else " CLI_URL_DEFAULT ")"},
    {"--publish", SLOT_PUBLISH, CLI_TEXT, 1, CLI_URL_BYTES_MAX, false, "URL",
     "tallyd's event publisher, for tail (default $TALLY_PUBLISH, else " CLI_PUBLISH_DEFAULT
     ")"},
    {"--json", SLOT_JSON, CLI_FLAG, 0, 0, false, NULL,
     "print one JSON object per result (one per line)"},
    {"--timeout-ms", SLOT_TIMEOUT_MS, CLI_UINT, 1, CLI_TIMEOUT_MS_MAX, false, "N",
     "wait this long for each attempt (default 5000)"},
    {"--consumer", SLOT_CONSUMER, CLI_TEXT, 1, TALLY_CONSUMER_BYTES_MAX, false, "NAME",
     "namespace of the keys (default $TALLY_CONSUMER, else " CLI_CONSUMER_DEFAULT ")"},
    {"--retries", SLOT_RETRIES, CLI_UINT, 0, CLI_RETRIES_MAX, false, "N",
     "extra attempts, same key, when the server is unreachable or busy (default 3)"},
    {"--token-file", SLOT_TOKEN_FILE, CLI_TEXT, 1, TALLY_PATH_BYTES_MAX - 1, false, "FILE",
     "send the token in FILE (mode 600) with every request, for tallyd --auth "
     "(default $TALLY_TOKEN_FILE, else $TALLY_TOKEN)"},
    {"--tls-ca", SLOT_TLS_CA, CLI_TEXT, 1, TALLY_PATH_BYTES_MAX, false, "FILE",
     "for tls+tcp:// URLs: the CA of tallyd's certificate (default $TALLY_TLS_CA)"},
    {"--tls-cert", SLOT_TLS_CERT, CLI_TEXT, 1, TALLY_PATH_BYTES_MAX, false, "FILE",
     "client certificate, when tallyd asks for one (default $TALLY_TLS_CERT)"},
    {"--tls-key", SLOT_TLS_KEY, CLI_TEXT, 1, TALLY_PATH_BYTES_MAX, false, "FILE",
     "its private key, mode 0600 (default $TALLY_TLS_KEY)"},
    {"--min-seq", SLOT_MIN_SEQ, CLI_UINT, 1, UINT64_MAX, false, "N",
     "reads: answer once tallyd has applied cluster position N (a write's cluster_seq; "
     "single-node: its log's head seq), else not_caught_up (docs/CLUSTER.md)"},
    {"--help", SLOT_HELP, CLI_FLAG, 0, 0, false, NULL, "explain tally, or the command"},
    {"--version", SLOT_VERSION, CLI_FLAG, 0, 0, false, NULL, "print the version"},
    OPT_END};

/* Imported history (docs/PROTOCOL.md, "Imported history"). */
#define OPT_IMPORTED_AT(what)                                                          \
    {"--imported-at", SLOT_IMPORTED_AT, CLI_TIME, 0, 0, false, "RFC3339",              \
     "imported history: the " what " was created at this past time (after every time " \
     "the store holds)"}

static const cli_option account_open_options[] = {
    ARG_ACCOUNT, OPT_LEDGER, OPT_CODE("account"),
    {"--debits-must-not-exceed-credits", SLOT_DEBITS_LIMITED, CLI_FLAG, 0, 0, false, NULL,
     "refuse transfers that would take debits above credits"},
    OPT_IMPORTED_AT("account"),
    {"--credits-must-not-exceed-debits", SLOT_CREDITS_LIMITED, CLI_FLAG, 0, 0, false, NULL,
     "refuse transfers that would take credits above debits"},
    OPT_USER_DATA("the account"), OPT_KEY, OPT_END};

static const cli_option account_get_options[] = {ARG_ACCOUNT, OPT_END};

/* A page of an account's history, by seq. */
#define OPT_HISTORY_PAGE                                                              \
    {"--limit", SLOT_LIMIT, CLI_UINT, 1, TALLY_HISTORY_ENTRIES_MAX, false, "N",       \
     "entries, 1..1000 (default 100)"},                                               \
    {"--after", SLOT_AFTER, CLI_UINT, 0, UINT64_MAX, false, "SEQ",                    \
     "entries after this seq (before it with --reverse): the next page"},             \
    {"--reverse", SLOT_REVERSE, CLI_FLAG, 0, 0, false, NULL, "newest first"}

static const cli_option account_history_options[] = {
    ARG_ACCOUNT,
    OPT_HISTORY_PAGE, OPT_END};

static const cli_option account_balances_options[] = {
    ARG_ACCOUNT,
    {"--from-time", SLOT_FROM_TIME, CLI_TIME, 0, 0, false, "RFC3339",
     "entries at or after this time"},
    {"--until", SLOT_UNTIL, CLI_TIME, 0, 0, false, "RFC3339", "entries at or before this time"},
    {"--seq-min", SLOT_SEQ_MIN, CLI_UINT, 1, UINT64_MAX, false, "SEQ",
     "entries at or after this seq"},
    {"--seq-max", SLOT_SEQ_MAX, CLI_UINT, 1, UINT64_MAX, false, "SEQ",
     "entries at or before this seq"},
    OPT_HISTORY_PAGE, OPT_END};

static const cli_option account_balance_at_options[] = {
    ARG_ACCOUNT,
    {"--time", SLOT_AT_TIME, CLI_TIME, 0, 0, false, "RFC3339",
     "the balances after every entry at or before this time"},
    {"--seq", SLOT_SEQ, CLI_UINT, 0, UINT64_MAX, false, "SEQ",
     "the balances after every entry at or before this seq"},
    OPT_END};

#define OPT_QUERY(what)                                                                            \
    {"--ledger", SLOT_LEDGER, CLI_UINT, 1, UINT32_MAX, false, "N", "only " what " of this ledger"},   \
    {"--code", SLOT_CODE, CLI_UINT, 1, UINT16_MAX, false, "N", "only " what " with this code"},       \
    {"--user-data-128", SLOT_USER_DATA_128, CLI_TID, 0, 0, false, "HEX",                           \
     "only " what " with this user_data_128 (32 hex digits or a decimal number)"},                 \
    {"--user-data-64", SLOT_USER_DATA_64, CLI_UINT, 1, UINT64_MAX, false, "N",                     \
     "only " what " with this user_data_64"},                                                      \
    {"--user-data-32", SLOT_USER_DATA_32, CLI_UINT, 1, UINT32_MAX, false, "N",                     \
     "only " what " with this user_data_32"},                                                      \
    {"--from-time", SLOT_FROM_TIME, CLI_TIME, 0, 0, false, "RFC3339",                              \
     "only " what " created at or after this time"},                                               \
    {"--until", SLOT_UNTIL, CLI_TIME, 0, 0, false, "RFC3339",                                      \
     "only " what " created at or before this time"},                                              \
    {"--reverse", SLOT_REVERSE, CLI_FLAG, 0, 0, false, NULL, "newest first"}

static const cli_option account_list_options[] = {
    {"--limit", SLOT_LIMIT, CLI_UINT, 1, CLI_LOG_LIMIT_MAX, false, "N",
     "accounts, 1..1000000 (default 100; read in pages of 1000)"},
    {"--after", SLOT_AFTER, CLI_UINT, 0, UINT64_MAX, false, "ID",
     "accounts with an id above this one: the next page"},
    OPT_QUERY("accounts"), OPT_END};

static const cli_option transfer_list_options[] = {
    {"--limit", SLOT_LIMIT, CLI_UINT, 1, CLI_LOG_LIMIT_MAX, false, "N",
     "transfers, 1..1000000 (default 100; read in pages of 1000)"},
    {"--account", SLOT_DEBIT, CLI_UINT, 1, UINT64_MAX, false, "ID",
     "only transfers that debit or credit this account"},
    {"--debits", SLOT_DEBITS_LIMITED, CLI_FLAG, 0, 0, false, NULL,
     "with --account: only the transfers that debit it"},
    {"--credits", SLOT_CREDITS_LIMITED, CLI_FLAG, 0, 0, false, NULL,
     "with --account: only the transfers that credit it"},
    OPT_QUERY("transfers"), OPT_END};

static const cli_option transfer_get_options[] = {
    {"TID", SLOT_TID, CLI_TID, 0, 0, true, NULL,
     "transfer id: 32 hex digits (dashes allowed) or a decimal number"},
    OPT_END};

static const cli_option transfer_options[] = {
    {"--debit", SLOT_DEBIT, CLI_UINT, 1, UINT64_MAX, true, "ID", "account debited"},
    {"--credit", SLOT_CREDIT, CLI_UINT, 1, UINT64_MAX, true, "ID", "account credited"},
    {"--amount", SLOT_AMOUNT, CLI_AMOUNT, 0, 0, true, "N", "amount, 1..2^63-1"},
    OPT_LEDGER, OPT_CODE("transfer"),
    {"--id", SLOT_ID, CLI_TID, 0, 0, false, "TID",
     "transfer id: 32 hex digits (dashes allowed) or a decimal number (default: from the key)"},
    {"--pending", SLOT_PENDING, CLI_FLAG, 0, 0, false, NULL,
     "hold the amount (post or void it later)"},
    {"--timeout-s", SLOT_TIMEOUT_S, CLI_UINT, 0, TALLY_HOLD_TIMEOUT_S_MAX, false, "N",
     "with --pending: the hold expires after N seconds (default 0: never)"},
    {"--balancing-debit", SLOT_BALANCING_DEBIT, CLI_FLAG, 0, 0, false, NULL,
     "move at most what keeps the debit account's debits within its credits"},
    {"--balancing-credit", SLOT_BALANCING_CREDIT, CLI_FLAG, 0, 0, false, NULL,
     "move at most what keeps the credit account's credits within its debits"},
    {"--closing-debit", SLOT_CLOSING_DEBIT, CLI_FLAG, 0, 0, false, NULL,
     "with --pending: close the debit account (voiding the hold reopens it)"},
    {"--closing-credit", SLOT_CLOSING_CREDIT, CLI_FLAG, 0, 0, false, NULL,
     "with --pending: close the credit account (voiding the hold reopens it)"},
    OPT_IMPORTED_AT("transfer"), OPT_USER_DATA("the transfer"), OPT_KEY, OPT_END};

static const cli_option post_options[] = {
    ARG_TID,
    {"--amount", SLOT_AMOUNT, CLI_AMOUNT, 0, 0, false, "N",
     "amount to post, at most the held amount (default: all of it)"},
    OPT_KEY, OPT_END};

static const cli_option void_options[] = {ARG_TID, OPT_KEY, OPT_END};

static const cli_option reverse_options[] = {
    {"TID", SLOT_TID, CLI_TID, 0, 0, true, NULL, "the posted transfer to reverse"},
    {"--amount", SLOT_AMOUNT, CLI_AMOUNT, 0, 0, false, "N",
     "amount to move back, at most what is not reversed yet (default: all of that)"},
    {"--id", SLOT_ID, CLI_TID, 0, 0, false, "TID",
     "the reversal's own transfer id (default: from the key)"},
    {"--code", SLOT_CODE, CLI_UINT, 1, UINT16_MAX, false, "N",
     "the reversal's code (default: the reversed transfer's)"},
    OPT_USER_DATA("the reversal"), OPT_KEY, OPT_END};

static const cli_option grant_options[] = {
    ARG_SUBJECT, ARG_FEATURE, OPT_UNTIL("end of validity"),
    OPT_FOR("valid for this long from now"), OPT_ORDER, OPT_KEY, OPT_END};

static const cli_option extend_options[] = {
    ARG_SUBJECT, ARG_FEATURE, OPT_UNTIL("new end"),
    OPT_FOR("instead of --until: move the current end this much later"), OPT_ORDER, OPT_KEY,
    OPT_END};

static const cli_option revoke_options[] = {ARG_SUBJECT, ARG_FEATURE, OPT_ORDER, OPT_KEY, OPT_END};

static const cli_option entitlements_options[] = {
    {"SUBJECT", SLOT_SUBJECT, CLI_TEXT, 1, TALLY_SUBJECT_BYTES_MAX, true, NULL,
     "whose entitlements to list"},
    OPT_END};

static const cli_option log_options[] = {
    {"--from", SLOT_FROM, CLI_UINT, 0, UINT64_MAX, false, "SEQ", "first seq (default 1)"},
    {"--limit", SLOT_LIMIT, CLI_UINT, 1, CLI_LOG_LIMIT_MAX, false, "N",
     "events, 1..1000000 (default 100; read in pages of 1000)"},
    OPT_END};

static const cli_option stats_options[] = {OPT_END};
static const cli_option health_options[] = {OPT_END};
static const cli_option cluster_status_options[] = {OPT_END};

#define ARG_NAME                                                                                   \
    {"NAME", SLOT_NAME, CLI_TEXT, 1, TALLY_SUBSCRIBER_NAME_BYTES_MAX, true, NULL,                  \
     "subscriber name, 1-64 bytes of A-Z a-z 0-9 . _ - :"}

static const cli_option tail_options[] = {
    {"--subscriber", SLOT_SUBSCRIBER, CLI_TEXT, 1, TALLY_SUBSCRIBER_NAME_BYTES_MAX, false, "NAME",
     "read as the durable subscriber NAME (created if needed): acknowledge what was read, "
     "continue there next time"},
    {"--from", SLOT_FROM, CLI_UINT, 1, UINT64_MAX, false, "SEQ", "start at this seq"},
    {"--from-start", SLOT_FROM_START, CLI_FLAG, 0, 0, false, NULL, "start at the first event"},
    {"--from-now", SLOT_FROM_NOW, CLI_FLAG, 0, 0, false, NULL,
     "start after the last event (the default without --subscriber)"},
    {"--from-time", SLOT_FROM_TIME, CLI_TIME, 0, 0, false, "RFC3339",
     "with --subscriber: start at the first event committed at or after this time"},
    {"--count", SLOT_EVENTS, CLI_UINT, 1, UINT64_MAX, false, "N",
     "exit after N events (default: follow until interrupted)"},
    {"--max-deliver", SLOT_MAX_DELIVER, CLI_UINT, 1, TALLY_SUB_MAX_DELIVER_MAX, false, "N",
     "new subscriber: deliveries of an event before it is parked (default 5)"},
    {"--ack-wait-ms", SLOT_ACK_WAIT_MS, CLI_UINT, TALLY_SUB_ACK_WAIT_MS_MIN,
     TALLY_SUB_ACK_WAIT_MS_MAX, false, "N",
     "new subscriber: redeliver an unacknowledged event after N ms (default 30000)"},
    {"--instance", SLOT_INSTANCE, CLI_TEXT, 1, TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX, false, "ID",
     "with --subscriber: the consumer instance to fetch as, 1-64 bytes of A-Z a-z 0-9 . _ - "
     "(default tally-cli); give each tail running at once on one subscriber its own"},
    OPT_END};

static const cli_option subscribers_options[] = {OPT_END};

static const cli_option subscriber_delete_options[] = {ARG_NAME, OPT_END};

static const cli_option subscriber_update_options[] = {
    ARG_NAME,
    {"--max-deliver", SLOT_MAX_DELIVER, CLI_UINT, 1, TALLY_SUB_MAX_DELIVER_MAX, false, "N",
     "deliveries of an event before it is parked"},
    {"--ack-wait-ms", SLOT_ACK_WAIT_MS, CLI_UINT, TALLY_SUB_ACK_WAIT_MS_MIN,
     TALLY_SUB_ACK_WAIT_MS_MAX, false, "N", "the lease of a delivery, ms"},
    {"--max-ack-pending", SLOT_MAX_ACK_PENDING, CLI_UINT, 1, TALLY_SUB_MAX_ACK_PENDING_MAX, false,
     "N", "events in flight at most"},
    {"--inactive-expiry-ms", SLOT_INACTIVE_EXPIRY_MS, CLI_UINT, 0,
     TALLY_SUB_INACTIVE_EXPIRY_MS_MAX, false, "N",
     "remove it after N ms without a fetch, ack or park (0: never)"},
    {"--filter-types", SLOT_FILTER_TYPES, CLI_TEXT, 0,
     TALLY_SUB_FILTER_TYPES_MAX * (TALLY_SUB_FILTER_TYPE_BYTES_MAX + 1), false, "LIST",
     "only these event types, comma-separated (\"\": any)"},
    {"--filter-kinds", SLOT_FILTER_KINDS, CLI_TEXT, 0, 64, false, "LIST",
     "only these entity kinds, comma-separated (\"\": any)"},
    {"--filter-subject", SLOT_FILTER_SUBJECT, CLI_TEXT, 0, TALLY_SUB_FILTER_GLOB_BYTES_MAX, false,
     "GLOB", "only entitlement events whose subject matches (\"\": any)"},
    {"--contact", SLOT_CONTACT, CLI_TEXT, 0, TALLY_SUB_OWNER_BYTES_MAX, false, "TEXT",
     "who owns its dead letters (\"\": none)"},
    {"--alert-route", SLOT_ALERT_ROUTE, CLI_TEXT, 0, TALLY_SUB_OWNER_BYTES_MAX, false, "TEXT",
     "where their alerts go: a label of its dead-letter metrics (\"\": none)"},
    OPT_END};

static const cli_option dlq_list_options[] = {
    ARG_NAME,
    {"--after", SLOT_AFTER, CLI_UINT, 0, UINT64_MAX, false, "SEQ", "dead letters after this seq"},
    {"--limit", SLOT_LIMIT, CLI_UINT, 1, CLI_LOG_LIMIT_MAX, false, "N",
     "dead letters, 1..1000000 (default 100; read in pages of 1000)"},
    OPT_END};

static const cli_option dlq_replay_options[] = {
    ARG_NAME,
    {"SEQ", SLOT_SEQ, CLI_UINT, 1, UINT64_MAX, false, NULL,
     "the dead letter to deliver again (default: all of them)"},
    OPT_END};

static const cli_option backup_options[] = {
    {"DEST", SLOT_NAME, CLI_TEXT, 2, TALLY_PATH_BYTES_MAX - 1, true, NULL,
     "absolute path of a new directory on tallyd's machine"},
    {"--progress", SLOT_PROGRESS, CLI_FLAG, 0, 0, false, NULL,
     "show progress on stderr even when it is not a terminal"},
    {"--no-progress", SLOT_NO_PROGRESS, CLI_FLAG, 0, 0, false, NULL, "never show progress"},
    OPT_END};

static const cli_option dlq_discard_options[] = {
    ARG_NAME, {"SEQ", SLOT_SEQ, CLI_UINT, 1, UINT64_MAX, true, NULL, "the dead letter to remove"},
    OPT_END};

#define ARG_ENDPOINT                                                                               \
    {"ENDPOINT", SLOT_ENDPOINT, CLI_TEXT, 1, TALLY_ENDPOINT_NAME_BYTES_MAX, true, NULL,            \
     "tally-relay's endpoint, as its [endpoint NAME]: 1-58 bytes of A-Z a-z 0-9 . _ -"}

static const cli_option endpoint_disable_options[] = {
    ARG_ENDPOINT,
    {"--reason", SLOT_REASON, CLI_TEXT, 1, TALLY_ENDPOINT_REASON_BYTES_MAX, false, "TEXT",
     "why, kept with the state and in the event (1-256 bytes)"},
    OPT_KEY, OPT_END};
static const cli_option endpoint_enable_options[] = {ARG_ENDPOINT, OPT_KEY, OPT_END};
static const cli_option endpoint_show_options[] = {ARG_ENDPOINT, OPT_END};
static const cli_option endpoint_recover_options[] = {
    ARG_ENDPOINT,
    {"--since", SLOT_FROM_TIME, CLI_TIME, 0, 0, false, "RFC3339",
     "resend every event committed at or after this time, e.g. 2027-01-01T00:00:00Z"},
    OPT_KEY, OPT_END};
static const cli_option endpoint_rotate_options[] = {
    ARG_ENDPOINT,
    {"--overlap", SLOT_FOR, CLI_TEXT, 1, 32, false, "DURATION",
     "how long the secret before it signs too, e.g. 24h, 0 for none, at most 30d (default 24h)"},
    OPT_KEY, OPT_END};
#define ENDPOINT_SETTINGS                                                                          \
    {"--types", SLOT_TYPES, CLI_TEXT, 0, TALLY_ENDPOINT_TYPES_BYTES_MAX, false, "TYPES",           \
     "event types it takes, space- or comma-separated: x.y exact, x.* a prefix, * all "            \
     "(at most 16; \"\": all)"},                                                                   \
    {"--retry-schedule", SLOT_RETRY_SCHEDULE, CLI_TEXT, 0, TALLY_ENDPOINT_SCHEDULE_BYTES_MAX,      \
     false, "DELAYS",                                                                             \
     "the delay before each attempt, the first 0, e.g. \"0 5s 5m 30m\" (\"\": the relay's "     \
     "default, 12 attempts over 2.8 days)"},                                                      \
    {"--connect-timeout-ms", SLOT_CONNECT_TIMEOUT_MS, CLI_UINT, 0, TALLY_ENDPOINT_TIMEOUT_MS_MAX, \
     false, "N", "libcurl's connect timeout (0: the relay's, 5000)"},                             \
    {"--request-timeout-ms", SLOT_REQUEST_TIMEOUT_MS, CLI_UINT, 0,                                \
     TALLY_ENDPOINT_TIMEOUT_MS_MAX, false, "N",                                                   \
     "the whole request's timeout (0: the relay's, 10000)"}
static const cli_option endpoint_create_options[] = {
    ARG_ENDPOINT,
    {"URL", SLOT_ENDPOINT_URL, CLI_TEXT, 1, TALLY_ENDPOINT_URL_BYTES_MAX, true, NULL,
     "where events are POSTed: http:// or https://"},
    ENDPOINT_SETTINGS,
    {"--backfill", SLOT_BACKFILL, CLI_TEXT, 1, TALLY_ENDPOINT_BACKFILL_BYTES_MAX, false, "FROM",
     "where its subscriber starts: none (default: new events), all, or a seq"},
    OPT_KEY, OPT_END};
static const cli_option endpoint_update_options[] = {
    ARG_ENDPOINT,
    {"URL", SLOT_ENDPOINT_URL, CLI_TEXT, 1, TALLY_ENDPOINT_URL_BYTES_MAX, false, NULL,
     "a new URL (default: kept)"},
    ENDPOINT_SETTINGS, OPT_KEY, OPT_END};
static const cli_option endpoint_delete_options[] = {ARG_ENDPOINT, OPT_KEY, OPT_END};
static const cli_option endpoint_list_options[] = {OPT_END};
static const cli_option endpoint_attempts_options[] = {
    ARG_ENDPOINT,
    {"--seq", SLOT_SEQ, CLI_UINT, 1, UINT64_MAX, false, "SEQ", "only the attempts of this event"},
    {"--limit", SLOT_LIMIT, CLI_UINT, 1, TALLY_ATTEMPTS_READ_MAX, false, "N",
     "attempts, newest first, 1..1000 (default 100)"},
    OPT_END};

/* ---- the command table ---- */

static const char details_transfer[] =
    "Without --id the transfer id is derived from the key, so repeating the command\n"
    "with the same --key is a retry (same id, same fields) and is answered\n"
    "\"replayed\"; the id is printed (transfer_id). With --id and no --key the key\n"
    "is \"transfer-<32 hex digits of the id>\", so repeating the same command is a\n"
    "retry too. A TID is 32 hex digits (dashes allowed) or a decimal number n\n"
    "(the 16-byte big-endian n). A hold (--pending) is resolved with `tally post`\n"
    "or `tally void`, or expires after --timeout-s.\n";

static const char details_write[] =
    "Without --key a new key (UUIDv7) is generated and printed; repeat the command\n"
    "with --key KEY to retry it safely: the first outcome is returned (replayed).\n";

static const char details_time[] =
    "--until takes an RFC 3339 time (2027-01-01T00:00:00Z or, with an offset and\n"
    "a fraction, 2027-01-01T09:00:00.5+02:00) or a date (midnight UTC); --for a\n"
    "duration: a number and a unit ms, s, m, h, d or w, several may follow each\n"
    "other (1d12h). A grant with neither is for life. Without --key a new key\n"
    "(UUIDv7) is generated and printed.\n";

static const char details_tail[] =
    "Without --subscriber, tail reads the live stream (tallyd's publisher, see\n"
    "--publish; what it drops is read from the log, so no event is skipped or\n"
    "shown twice) from --from SEQ, --from-start, or by default from now; nothing\n"
    "is remembered. With --subscriber NAME, tail reads as that durable subscriber:\n"
    "each event is acknowledged once printed, and the next `tail --subscriber NAME`\n"
    "continues after it (an event printed just before a crash may be printed\n"
    "again). A new subscriber starts at --from SEQ, --from-now, --from-time, or by\n"
    "default at the first event; an existing one continues where it is, and\n"
    "--max-deliver, --ack-wait-ms must match its settings or be left out (see\n"
    "`tally subscribers --json`). tail fetches as the consumer instance tally-cli,\n"
    "or --instance ID: what an instance left unacknowledged (a tail stopped\n"
    "mid-batch) comes back at once to the next tail of that instance, and two\n"
    "tails reading one subscriber at the same time need two instances, which\n"
    "share its events. Without --count, tail follows until interrupted\n"
    "(Ctrl-C: exit 0). --json prints one object per event: seq, event_id, type,\n"
    "entity_kind, entity, entity_version, time, time_ms, consumer, key, and with\n"
    "--subscriber attempt and replay.\n";

static const cli_option auth_hash_options[] = {OPT_END};

const cli_command cli_commands[] = {
    {"account open", "Open an account.", account_open_options, run_account_open, details_write},
    {"account get", "Show an account with its balances and version.", account_get_options,
     run_account_get, NULL},
    {"account history", "Show the transfer events of an account, with its balances after each.",
     account_history_options, run_account_history,
     "--json prints one object per line: seq, type, time, transfer, account.\n"},
    {"account balances", "Show an account's balances after each transfer event in a time or seq "
     "range.", account_balances_options, run_account_balances,
     "--json prints one object per line: seq, time, time_ms, debits_pending,\n"
     "debits_posted, credits_pending, credits_posted. An entry's time is its\n"
     "transfer's creation time (imported history: the given time), else the\n"
     "event's commit time (docs/PROTOCOL.md, \"Balances at a point in time\").\n"},
    {"account balance-at", "Show an account's balances as they were at a time or a seq.",
     account_balance_at_options, run_account_balance_at,
     "Give --time or --seq. Seq 0 and zero balances: no entry is that early.\n"},
    {"account list", "List accounts in id order, with their balances and versions.",
     account_list_options, run_account_list,
     "--json prints one object per line, as `tally --json account get` prints one.\n"
     "When --limit accounts were shown and more follow, the command for the next page\n"
     "is printed on stderr. With a filter (--ledger, --code, --user-data-*,\n"
     "--from-time, --until, --reverse) the accounts that match it are listed in\n"
     "creation order instead (docs/PROTOCOL.md, \"Queries\"); --after is for the\n"
     "listing by id only.\n"},
    {"transfer list", "List transfers by ledger, code, user data, account and creation time.",
     transfer_list_options, run_transfer_list,
     "Transfers in creation order (newest first with --reverse), read in pages\n"
     "(docs/PROTOCOL.md, \"Queries\"). --json prints one object per line, as\n"
     "`tally --json transfer get` prints one.\n"},
    {"transfer", "Move an amount from one account to another, or hold it (--pending).",
     transfer_options, run_transfer, details_transfer},
    {"transfer get", "Show a transfer or hold: accounts, amount, state, times and version.",
     transfer_get_options, run_transfer_get,
     "--json prints one object: id, debit_account_id, credit_account_id, amount,\n"
     "ledger, code, flags, pending, state, timeout_s, expires_at, posted_amount,\n"
     "version, created_seq, resolved_seq, created, user_data_128, user_data_64,\n"
     "user_data_32, reverses, reversed_amount.\n"},
    {"post", "Post (capture) a hold, fully or partly.", post_options, run_post, details_write},
    {"void", "Void a hold.", void_options, run_void, details_write},
    {"reverse", "Reverse a posted transfer, all or part of it, with a transfer the other way.",
     reverse_options, run_reverse,
     "The reversal is a new transfer from the reversed one's credit account to its\n"
     "debit account; its `reverses` names the original, whose reversed_amount grows\n"
     "(`tally transfer get`). Its id comes from the key as for `tally transfer`.\n"},
    {"grant", "Grant an entitlement: until a time, for a duration, or for life.", grant_options,
     run_grant, details_time},
    {"extend", "Extend an active or expired entitlement to a later end.", extend_options,
     run_extend, details_time},
    {"revoke", "Revoke an entitlement.", revoke_options, run_revoke, details_write},
    {"entitlements", "List a subject's entitlements, states evaluated now.",
     entitlements_options, run_entitlements,
     "--json prints one JSON list of objects (valid_until null for a lifetime grant).\n"},
    {"log", "Show events of the log from a seq.", log_options, run_log,
     "--json prints one object per line: seq, event_id, type, entity_kind,\n"
     "entity_version, time, consumer, key (null for events of the expiry sweep).\n"},
    {"stats", "Show the head seq, counts, inbox size, map use and subscribers.", stats_options,
     run_stats, "--json prints one object; subscribers is the list of their metrics (as in\n"
     "`tally subscribers --json`).\n"},
    {"health", "Run tallyd's readiness and alert checks.", health_options, run_health,
     "The checks of GET /readyz (tallyd's --ready-*, --writer-stall-ms and --alert-*\n"
     "options, docs/OPERATIONS.md). Readiness checks (free disk, map room, a recent\n"
     "storage_full, the writer's progress) say whether tallyd can take writes; alert\n"
     "checks (map use, subscriber backlog) are for an operator.\n"
     "Exit 0 when every check passes, 1 when only alert checks fail (tallyd is\n"
     "ready), 5 when a readiness check fails (not ready: /readyz answers 503),\n"
     "3 when tallyd is unreachable.\n"
     "--json prints one object: ready, healthy, checks (check, class, subscriber,\n"
     "ok, value, threshold, reason).\n"},
    {"cluster status", "Show a cluster node's place in the command stream.",
     cluster_status_options, run_cluster_status,
     "The node --url names: its name, the command stream, the position it has\n"
     "applied, the stream's last seq as it last saw it, its lag behind it, its\n"
     "last checkpoint and the agreement there (A/N: the nodes whose state digest\n"
     "is this node's, of the N heard; \"diverged\" when the node stopped serving)\n"
     "(docs/CLUSTER.md). With a list of URLs, every node of it, a line each (URL,\n"
     "NODE, POSITION, STREAM_LAST_SEQ, LAG, CHECKPOINT, AGREEMENT; a node that does\n"
     "not answer shows its code), exit 0 only when every node answered. A\n"
     "single-node tallyd answers not_in_cluster_mode (exit 1).\n"
     "--json prints one object: node, stream, position, stream_last_seq,\n"
     "lag_messages, checkpoint_position, checkpoint_agreeing, checkpoint_nodes,\n"
     "diverged; with a list, one such object per line, with its url (or url and\n"
     "code).\n"},
    {"tail", "Follow the event log: live, or as a durable subscriber that resumes.",
     tail_options, run_tail, details_tail},
    {"subscribers", "List durable subscribers: progress, backlog, redeliveries, dead letters.",
     subscribers_options, run_subscribers,
     "PENDING is head - ACK_FLOOR; OLDEST_UNACKED_AGE_S the age of the event after the\n"
     "ack floor; OLDEST_DEAD_LETTER_AGE_S the time since the oldest dead letter was\n"
     "parked (0: none); LAST_FETCH_AGE_S the time since the subscriber last fetched\n"
     "(since tallyd started, if it has not). --json prints one object per subscriber\n"
     "with every metric and setting.\n"},
    {"subscribers show", "Show a subscriber: settings, partitions, why its in-flight events wait.",
     subscriber_delete_options, run_subscriber_show,
     "Its metrics and settings (filter, inactivity expiry, the owner of its dead\n"
     "letters, partitions); for a subscriber with partitions, each partition with\n"
     "the consumer instance holding it (- : free, or its lease ran out) and the end\n"
     "of its lease; then its first in-flight events (at most 100): delivered and not\n"
     "yet acknowledged or parked, each with its attempts (0: queued for its\n"
     "partition's holder), holder (the consumer instance leasing it), next delivery\n"
     "time and last error (a nak's reason).\n"
     "--json prints one object: the fields of `tally subscribers --json`, the\n"
     "settings, partitions, partition_holders (partition, holder, lease_until) and\n"
     "in_flight_events (seq, attempts, replay, last_error, holder, deliver_after,\n"
     "deliver_after_ms).\n"},
    {"subscriber update", "Change a subscriber's settings and owner, keeping its cursor.",
     subscriber_update_options, run_subscriber_update,
     "Only the options given change; the cursor, the events in flight and the dead\n"
     "letters stay, nothing is replayed (docs/SUBSCRIBERS.md, \"Changing a\n"
     "subscriber\"). An empty text clears a filter or the owner.\n"
     "--json prints one object: the subscriber, as `subscribers show --json` without\n"
     "partition_holders and in_flight_events.\n"},
    {"subscriber delete", "Delete a durable subscriber with its in-flight events and dead letters.",
     subscriber_delete_options, run_subscriber_delete, NULL},
    {"dlq list", "List a subscriber's dead letters (parked events).", dlq_list_options,
     run_dlq_list,
     "A line naming the subscriber's owner (contact, alert route) comes first when\n"
     "it has one. --json prints one object per line: seq, attempts, error, parked,\n"
     "replaying, event_id, type, contact, alert_route.\n"},
    {"dlq replay", "Deliver a subscriber's dead letters again, ahead of new events.",
     dlq_replay_options, run_dlq_replay, NULL},
    {"dlq discard", "Remove a subscriber's dead letter for good.", dlq_discard_options,
     run_dlq_discard, NULL},
    {"endpoint create", "Define an HTTP endpoint of tally-relay in tallyd; its secret on stdin.",
     endpoint_create_options, run_endpoint_create,
     "Reads one line on stdin: its signing secret, whsec_<base64 of 24-64 bytes>.\n"
     "An endpoint.created event; every tally-relay of this tallyd starts delivering\n"
     "to it within seconds, without a restart, as if it were an [endpoint NAME] of\n"
     "its file (docs/RELAY.md, \"Endpoints managed at run time\"); an endpoint of a\n"
     "relay's file by the same name wins there. Settings not given are the relay's\n"
     "defaults.\n"},
    {"endpoint update", "Change an endpoint defined in tallyd: its URL, types, schedule, timeouts.",
     endpoint_update_options, run_endpoint_update,
     "An endpoint.updated event; the relays run it by its new settings from their\n"
     "next look (its cursor, events in flight and dead letters kept). A setting not\n"
     "given is kept; \"\" gives back the relay's default. The secret changes with\n"
     "`tally endpoint rotate-secret`.\n"},
    {"endpoint delete", "Remove an endpoint defined in tallyd: the relays stop delivering to it.",
     endpoint_delete_options, run_endpoint_delete,
     "An endpoint.deleted event; its state and secrets in tallyd are forgotten. Its\n"
     "subscriber relay:NAME (its cursor and dead letters) stays until `tally\n"
     "subscriber delete relay:NAME`.\n"},
    {"endpoint list", "List the endpoints defined in tallyd (without their secrets).",
     endpoint_list_options, run_endpoint_list,
     "--json prints one object per line: endpoint, state, version, changed, url,\n"
     "types, retry_schedule, connect_timeout_ms, timeout_ms, backfill.\n"},
    {"endpoint show", "Show whether tally-relay's endpoint is enabled, since when and why.",
     endpoint_show_options, run_endpoint_show,
     "An endpoint tallyd has no state for (never disabled) is enabled.\n"
     "--json prints one object: endpoint, state, version, changed, reason,\n"
     "recover_since (null unless a recover is pending).\n"},
    {"endpoint attempts", "List tally-relay's delivery attempts to an endpoint, newest first.",
     endpoint_attempts_options, run_endpoint_attempts,
     "From tallyd's attempt log (docs/RELAY.md, \"The attempt log\"), kept for the\n"
     "endpoint's attempt_retention (7 days by default): each attempt's time, event\n"
     "seq, attempt number, HTTP status (- without an answer), latency, error and the\n"
     "first 256 bytes of the answer's body.\n"
     "--json prints one object per line: time, time_ms, seq, attempt, status,\n"
     "latency_ms, error, response.\n"},
    {"endpoint recover", "Have tally-relay resend every event since a time to an endpoint.",
     endpoint_recover_options, run_endpoint_recover,
     "An endpoint.recover_requested event. A relay with the endpoint then POSTs\n"
     "again every event committed at or after --since, up to the head at that\n"
     "moment, of the types the endpoint takes, in seq order, each until it is\n"
     "taken, before it delivers anything new; then endpoint.recovered. The\n"
     "receiver drops repeats by webhook-id (docs/RELAY.md, \"Recover\").\n"},
    {"endpoint rotate-secret", "Give tally-relay's endpoint a new signing secret, read on stdin.",
     endpoint_rotate_options, run_endpoint_rotate_secret,
     "Reads one line on stdin: whsec_<base64 of 24-64 bytes> (Standard Webhooks).\n"
     "From then on the relays sign with it, and during --overlap with the secret\n"
     "before it as well (webhook-signature: v1,<new> v1,<old>), so a receiver\n"
     "that still has the old one accepts every delivery while it changes. An\n"
     "endpoint.secret_rotated event (without the secret). The secret is kept in\n"
     "tallyd's store (docs/RELAY.md, \"Secret rotation\").\n"},
    {"endpoint disable",
     "Disable tally-relay's endpoint: nothing is delivered to it until enabled.",
     endpoint_disable_options, run_endpoint_disable,
     "An endpoint.disabled event; every relay with the endpoint stops delivering to\n"
     "it (its events wait, in order) until `tally endpoint enable`. A relay disables\n"
     "an endpoint itself after it failed for its disable_after (docs/RELAY.md).\n"},
    {"endpoint enable", "Enable a disabled endpoint of tally-relay again.",
     endpoint_enable_options, run_endpoint_enable,
     "An endpoint.enabled event; the relays deliver to it again, from where it was.\n"},
    {"backup", "Have tallyd write an online, consistent, compacted copy of its store.",
     backup_options, run_backup,
     "DEST is a directory that must not exist yet, on the machine tallyd runs on\n"
     "(below tallyd's --backup-dir when it has one). Restoring: docs/OPERATIONS.md.\n"
     "--json prints one object: code, path, bytes.\n"
     "Progress (stderr, when it is a terminal): the bytes of DEST/data.mdb written\n"
     "so far, of the store's used size (stats map_used_bytes); the compacted copy\n"
     "may end below 100 %. It needs DEST readable from where tally runs.\n"},
    {"auth hash", "Print the SHA-256 of a token read on stdin, for a line of tallyd's --auth file.",
     auth_hash_options, run_auth_hash,
     "Reads one token (a trailing newline is dropped) and prints 64 hex digits:\n"
     "the second column of a principal line (docs/SECURITY.md). Nothing is sent.\n"},
    {NULL}};

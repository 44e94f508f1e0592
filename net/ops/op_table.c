/*
 * op_table.c — the op table: one row per op, with its kind, its fields as
 * data, its handlers (net/ops/protocol.h says what each member does) and its
 * auth class, what tallyd --auth requires of the caller (net/auth/auth.h,
 * docs/SECURITY.md). Rows
 * are filled by name, so a misplaced value cannot compile into the wrong
 * member; adding an op is a row here, its handlers in the ops_*.c room of
 * its kind, and its documented example (docs/DESIGN.md, "Adding an op").
 */
#include "net/ops/ops.h"

#define U16 UINT16_MAX
#define U32 UINT32_MAX
#define U64 UINT64_MAX

#define F_ACCOUNT_ID(n, d) {n, NET_FIELD_UINT, true, U64, d}
#define F_SUBJECT {"subject", NET_FIELD_STR, true, TALLY_SUBJECT_BYTES_MAX, "who has access (1-128 bytes)"}
#define F_FEATURE {"feature", NET_FIELD_STR, true, TALLY_FEATURE_BYTES_MAX, "what they have access to (1-64 bytes)"}
#define F_ORDER {"source_order", NET_FIELD_UINT, false, U64, "provider's ordering value (sequence or event time); a command not newer than the last applied is `stale`"}
#define F_UNTIL {"valid_until_ms", NET_FIELD_INT, false, 0, "end of validity, Unix ms"}
#define F_SUB_NAME {"name", NET_FIELD_STR, true, TALLY_SUBSCRIBER_NAME_BYTES_MAX, "subscriber name: 1-64 bytes of A-Z a-z 0-9 . _ - :"}
#define F_SUB_SEQ(d) {"seq", NET_FIELD_UINT, true, U64, d}
#define F_DURATION {"duration_ms", NET_FIELD_INT, false, 0, "validity from the commit time (grant) or from the current end (extend), ms"}

/* The behaviour of each kind of row. */
#define WRITE(cmd) \
    .kind = NET_KIND_WRITE, .build = net_build_write, .command = (cmd), \
    .apply = net_apply_writes, .reply = net_reply_writes
#define WRITE_MEMBERS \
    .kind = NET_KIND_WRITE, .build = net_request_members, .apply = net_apply_writes, \
    .reply = net_reply_writes
#define READ(builder, handler) .kind = NET_KIND_READ, .build = (builder), .read = (handler)
#define SUBSCRIBER(builder, op) \
    .kind = NET_KIND_SUBSCRIBER, .build = (builder), .apply = net_apply_##op, \
    .reply = net_reply_##op

const net_op net_ops[NET_OP_COUNT] = {
    [NET_OP_ACCOUNT_OPEN] = {
        .id = NET_OP_ACCOUNT_OPEN, .name = "account_open", .auth = AUTH_CLASS_WRITE, WRITE(net_command_account_open),
        .doc = "Open an account.",
        .fields = {F_ACCOUNT_ID("id", "account id, != 0"),
                   {"ledger", NET_FIELD_UINT, true, U32, "ledger, != 0"},
                   {"code", NET_FIELD_UINT, true, U16, "account code, != 0"},
                   {"flags", NET_FIELD_UINT, false, U16,
                    "bit 0 debits_must_not_exceed_credits, bit 1 credits_must_not_exceed_debits (default 0)"}}},
    [NET_OP_TRANSFER] = {
        .id = NET_OP_TRANSFER, .name = "transfer", .auth = AUTH_CLASS_WRITE, WRITE(net_command_transfer),
        .doc = "Move an amount from one account to another, or hold it (flags bit 0).",
        .fields = {{"id", NET_FIELD_ID128, true, 16, "transfer id (16 bytes, != 0), unique"},
                   F_ACCOUNT_ID("debit_account_id", "account debited"),
                   F_ACCOUNT_ID("credit_account_id", "account credited"),
                   {"amount", NET_FIELD_AMOUNT, true, INT64_MAX, "1 .. 2^63-1"},
                   {"ledger", NET_FIELD_UINT, true, U32, "must equal both accounts' ledger"},
                   {"code", NET_FIELD_UINT, true, U16, "transfer code, != 0"},
                   {"flags", NET_FIELD_UINT, false, U16, "bit 0 pending: a hold (default 0)"},
                   {"timeout_s", NET_FIELD_UINT, false, TALLY_HOLD_TIMEOUT_S_MAX,
                    "holds: expire after this many seconds (0 = never)"}}},
    [NET_OP_POST] = {
        .id = NET_OP_POST, .name = "post", .auth = AUTH_CLASS_WRITE, WRITE(net_command_post),
        .doc = "Post (capture) a hold, fully or partly.",
        .fields = {{"pending_id", NET_FIELD_ID128, true, 16, "the hold's transfer id"},
                   {"amount", NET_FIELD_AMOUNT, false, INT64_MAX, "amount to post, 1 .. held (absent: all)"}}},
    [NET_OP_VOID] = {
        .id = NET_OP_VOID, .name = "void", .auth = AUTH_CLASS_WRITE, WRITE(net_command_void),
        .doc = "Void a hold.",
        .fields = {{"pending_id", NET_FIELD_ID128, true, 16, "the hold's transfer id"}}},
    [NET_OP_GRANT] = {
        .id = NET_OP_GRANT, .name = "grant", .auth = AUTH_CLASS_WRITE, WRITE(net_command_grant),
        .doc = "Grant an entitlement (for life when neither end nor duration is given).",
        .fields = {F_SUBJECT, F_FEATURE, F_UNTIL, F_DURATION, F_ORDER,
                   {"grant_transfer_id", NET_FIELD_ID128, false, 16, "the transfer that paid for it (must exist)"}}},
    [NET_OP_EXTEND] = {
        .id = NET_OP_EXTEND, .name = "extend", .auth = AUTH_CLASS_WRITE, WRITE(net_command_extend),
        .doc = "Extend an active or expired entitlement to a later end.",
        .fields = {F_SUBJECT, F_FEATURE, F_UNTIL, F_DURATION, F_ORDER}},
    [NET_OP_REVOKE] = {
        .id = NET_OP_REVOKE, .name = "revoke", .auth = AUTH_CLASS_WRITE, WRITE(net_command_revoke),
        .doc = "Revoke an entitlement.",
        .fields = {F_SUBJECT, F_FEATURE, F_ORDER}},
    [NET_OP_CHAIN] = {
        .id = NET_OP_CHAIN, .name = "chain", .auth = AUTH_CLASS_WRITE, WRITE_MEMBERS,
        .doc = "Apply write ops all-or-nothing under one key.",
        .fields = {{"ops", NET_FIELD_OPS, true, TALLY_CHAIN_COMMANDS_MAX,
                    "member op maps: `op` and its fields, no `key`"}}},
    [NET_OP_BATCH] = {
        .id = NET_OP_BATCH, .name = "batch", .auth = AUTH_CLASS_WRITE, WRITE_MEMBERS,
        .doc = "Several independent writes in one request, each with its own key and result.",
        .fields = {{"ops", NET_FIELD_OPS, true, TALLY_BATCH_OPS_MAX,
                    "member op maps: `op`, `key`, optional `correlation`, and the op's fields"}}},
    [NET_OP_ACCOUNT_GET] = {
        .id = NET_OP_ACCOUNT_GET, .name = "account_get", .auth = AUTH_CLASS_READ,
        READ(net_build_account_read, net_read_account),
        .doc = "An account with its balances and version.",
        .fields = {F_ACCOUNT_ID("id", "account id")}},
    [NET_OP_ACCOUNT_HISTORY] = {
        .id = NET_OP_ACCOUNT_HISTORY, .name = "account_history", .auth = AUTH_CLASS_READ,
        READ(net_build_history, net_read_history),
        .doc = "An account's transfer events, paged by seq.",
        .fields = {F_ACCOUNT_ID("id", "account id"),
                   {"after_seq", NET_FIELD_UINT, false, U64,
                    "page cursor: entries after (or with `reverse`, before) this seq"},
                   {"limit", NET_FIELD_UINT, false, TALLY_HISTORY_ENTRIES_MAX, "entries (default 100)"},
                   {"reverse", NET_FIELD_BOOL, false, 0, "newest first (default false)"}}},
    [NET_OP_ACCOUNT_LIST] = {
        .id = NET_OP_ACCOUNT_LIST, .name = "account_list", .auth = AUTH_CLASS_READ,
        READ(net_build_account_list, net_read_account_list),
        .doc = "Accounts with their balances and versions, paged by id.",
        .fields = {{"after_id", NET_FIELD_UINT, false, U64, "page cursor: accounts after this id (default 0)"},
                   {"limit", NET_FIELD_UINT, false, TALLY_ACCOUNT_LIST_ENTRIES_MAX, "entries, >= 1 (default 100)"}}},
    [NET_OP_TRANSFER_GET] = {
        .id = NET_OP_TRANSFER_GET, .name = "transfer_get", .auth = AUTH_CLASS_READ,
        READ(net_build_transfer_read, net_read_transfer),
        .doc = "A transfer or hold.",
        .fields = {{"id", NET_FIELD_ID128, true, 16, "transfer id"}}},
    [NET_OP_ENTITLEMENT_GET] = {
        .id = NET_OP_ENTITLEMENT_GET, .name = "entitlement_get", .auth = AUTH_CLASS_READ,
        READ(net_build_entitlement_read, net_read_entitlement),
        .doc = "One entitlement, its state evaluated now.",
        .fields = {F_SUBJECT, F_FEATURE}},
    [NET_OP_ENTITLEMENT_LIST] = {
        .id = NET_OP_ENTITLEMENT_LIST, .name = "entitlement_list", .auth = AUTH_CLASS_READ,
        READ(net_build_entitlement_read, net_read_entitlement_list),
        .doc = "A subject's entitlements, states evaluated now.",
        .fields = {F_SUBJECT}},
    [NET_OP_LOG_READ] = {
        .id = NET_OP_LOG_READ, .name = "log_read", .auth = AUTH_CLASS_READ, READ(net_build_log_read, net_read_log),
        .read_waits = net_log_read_waits,
        .doc = "Events from a seq, optionally waiting for new ones.",
        .fields = {{"from_seq", NET_FIELD_UINT, false, U64, "first seq wanted (default 1)"},
                   {"limit", NET_FIELD_UINT, false, TALLY_LOG_READ_EVENTS_MAX, "events (default 100); a page also holds at most 2 MiB of events, at least one"},
                   {"wait_ms", NET_FIELD_UINT, false, TALLY_LOG_WAIT_MS_MAX,
                    "if none yet, wait up to this long for one (default 0)"}}},
    [NET_OP_STATS] = {
        .id = NET_OP_STATS, .name = "stats", .auth = AUTH_CLASS_READ, READ(net_build_nothing, net_read_stats),
        .doc = "Head seq, counts, inbox size, map use, subscribers' metrics."},
    [NET_OP_SUB_CREATE] = {
        .id = NET_OP_SUB_CREATE, .name = "sub_create", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(net_build_sub_create, sub_create),
        .doc = "Create a durable subscriber (an identical one existing is ok, `created` false).",
        .fields = {F_SUB_NAME,
                   {"start", NET_FIELD_STR, false, 16, "`beginning` (default) or `now`"},
                   {"from_seq", NET_FIELD_UINT, false, U64, "start at this seq (1 .. head + 1)"},
                   {"from_time_ms", NET_FIELD_INT, false, 0,
                    "start at the first event committed at or after this Unix ms"},
                   {"max_deliver", NET_FIELD_UINT, false, TALLY_SUB_MAX_DELIVER_MAX,
                    "deliveries of an event before it is parked, >= 1 (default 5)"},
                   {"ack_wait_ms", NET_FIELD_UINT, false, TALLY_SUB_ACK_WAIT_MS_MAX,
                    "redelivery delay of an unacked event, >= 100 (default 30000)"},
                   {"backoff_ms", NET_FIELD_UINTS, false, TALLY_SUB_BACKOFF_STEPS_MAX,
                    "redelivery delay after the n-th delivery (the last repeats); replaces ack_wait_ms; each <= 86400000"},
                   {"max_ack_pending", NET_FIELD_UINT, false, TALLY_SUB_MAX_ACK_PENDING_MAX,
                    "events in flight at most, >= 1 (default 1000)"}}},
    [NET_OP_SUB_GET] = {
        .id = NET_OP_SUB_GET, .name = "sub_get", .auth = AUTH_CLASS_READ, READ(net_build_sub_named, net_read_sub),
        .doc = "A subscriber's metrics.", .fields = {F_SUB_NAME}},
    [NET_OP_SUB_LIST] = {
        .id = NET_OP_SUB_LIST, .name = "sub_list", .auth = AUTH_CLASS_READ, READ(net_build_nothing, net_read_sub_list),
        .doc = "Every subscriber's metrics, in name order."},
    [NET_OP_SUB_DELETE] = {
        .id = NET_OP_SUB_DELETE, .name = "sub_delete", .auth = AUTH_CLASS_ADMIN, SUBSCRIBER(net_build_sub_named, sub_delete),
        .doc = "Delete a subscriber with its in-flight records and dead letters.",
        .fields = {F_SUB_NAME}},
    [NET_OP_SUB_FETCH] = {
        .id = NET_OP_SUB_FETCH, .name = "sub_fetch", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(net_build_sub_fetch, sub_fetch),
        .apply_waits = net_sub_fetch_waits,
        .doc = "Deliver events: replays, then due redeliveries, then new events.",
        .fields = {F_SUB_NAME,
                   {"max", NET_FIELD_UINT, false, TALLY_SUB_FETCH_EVENTS_MAX, "events, >= 1 (default 100); at most 2 MiB of events, at least one"},
                   {"wait_ms", NET_FIELD_UINT, false, TALLY_LOG_WAIT_MS_MAX,
                    "if none is due, wait up to this long (default 0)"},
                   {"restart", NET_FIELD_BOOL, false, 0,
                    "the in-flight events of `instance` (without one: every in-flight event) are due now (a consumer's first fetch; default false)"},
                   {"instance", NET_FIELD_STR, false, TALLY_SUB_INSTANCE_BYTES_MAX,
                    "this consumer instance's id, 1-64 bytes of A-Z a-z 0-9 . _ -: what it is handed is leased to it until acked or the ack wait passes (default: none)"}}},
    [NET_OP_SUB_ACK] = {
        .id = NET_OP_SUB_ACK, .name = "sub_ack", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(net_build_sub_ack, sub_ack),
        .doc = "Acknowledge events: `seq` (everything up to it) and/or `done`.",
        .fields = {F_SUB_NAME,
                   {"seq", NET_FIELD_UINT, false, U64, "every event <= seq is done (<= head)"},
                   {"done", NET_FIELD_UINTS, false, TALLY_SUB_ACK_SEQS_MAX, "these delivered seqs are done"}}},
    [NET_OP_SUB_NAK] = {
        .id = NET_OP_SUB_NAK, .name = "sub_nak", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(net_build_sub_nak, sub_nak),
        .doc = "Retry an in-flight event later.",
        .fields = {F_SUB_NAME, F_SUB_SEQ("the in-flight event"),
                   {"delay_ms", NET_FIELD_UINT, false, TALLY_SUB_ACK_WAIT_MS_MAX,
                    "due again after this long (default: the backoff rule)"},
                   {"error", NET_FIELD_STR, false, TALLY_SUB_ERROR_BYTES_MAX, "why; kept as the event's last error"}}},
    [NET_OP_SUB_PARK] = {
        .id = NET_OP_SUB_PARK, .name = "sub_park", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(net_build_sub_park, sub_park),
        .doc = "Move an in-flight event to the dead-letter queue.",
        .fields = {F_SUB_NAME, F_SUB_SEQ("the in-flight event"),
                   {"reason", NET_FIELD_STR, false, TALLY_SUB_ERROR_BYTES_MAX, "why"}}},
    [NET_OP_DLQ_LIST] = {
        .id = NET_OP_DLQ_LIST, .name = "dlq_list", .auth = AUTH_CLASS_SUBSCRIBE, READ(net_build_dlq_list, net_read_dlq),
        .doc = "A subscriber's dead letters, paged by seq.",
        .fields = {F_SUB_NAME,
                   {"after_seq", NET_FIELD_UINT, false, U64, "page cursor: entries after this seq (default 0)"},
                   {"limit", NET_FIELD_UINT, false, TALLY_DLQ_LIST_ENTRIES_MAX, "entries, >= 1 (default 100)"}}},
    [NET_OP_DLQ_REPLAY] = {
        .id = NET_OP_DLQ_REPLAY, .name = "dlq_replay", .auth = AUTH_CLASS_ADMIN, SUBSCRIBER(net_build_dlq_seq, dlq_replay),
        .doc = "Deliver dead letters again, ahead of new events.",
        .fields = {F_SUB_NAME, {"seq", NET_FIELD_UINT, false, U64, "this dead letter (default: all)"}}},
    [NET_OP_DLQ_DISCARD] = {
        .id = NET_OP_DLQ_DISCARD, .name = "dlq_discard", .auth = AUTH_CLASS_ADMIN, SUBSCRIBER(net_build_dlq_seq, dlq_discard),
        .doc = "Remove a dead letter.",
        .fields = {F_SUB_NAME, F_SUB_SEQ("the dead letter")}},
    [NET_OP_BACKUP] = {
        .id = NET_OP_BACKUP, .name = "backup", .auth = AUTH_CLASS_ADMIN, .kind = NET_KIND_CONTROL,
        .build = net_build_backup, .control = net_control_backup,
        .doc = "An online, compacting, consistent copy of the store into a new directory on the server's machine (docs/OPERATIONS.md).",
        .fields = {{"path", NET_FIELD_STR, true, TALLY_PATH_BYTES_MAX - 1,
                    "absolute path of a directory that does not exist yet (below tallyd's --backup-dir when set)"}}},
    [NET_OP_HEALTH] = {
        .id = NET_OP_HEALTH, .name = "health", .auth = AUTH_CLASS_NONE, .kind = NET_KIND_CONTROL,
        .build = net_build_nothing, .control = net_control_health,
        .doc = "The health checks against tallyd's alert thresholds (--alert-*), as GET /readyz runs them (docs/OPERATIONS.md)."},
};

/*
 * op_table.c — the op table: one row per op, with its kind, its fields
 * (the rows made from its list in net/ops/op_fields.h), its handlers
 * (net/ops/protocol.h says what each member does) and its auth class, what
 * tallyd --auth requires of the caller (net/auth/auth.h, docs/SECURITY.md).
 * Rows are filled by name, so a misplaced value cannot compile into the
 * wrong member; adding an op is a row here, its field list, its handlers
 * in the ops_*.c room of its kind, and its documented example
 * (docs/DESIGN.md, "Adding an op").
 */
#include "net/ops/ops.h"

/* The typed handlers in rows that pass fields as void *: each thunk
 * converts to the struct of its own list, so handing one op's struct to
 * another's handler is a compile-time type error (an error even without
 * --enable-werror). */
#pragma GCC diagnostic error "-Wincompatible-pointer-types"
#define BUILD_OF(list)                                                  \
    static int build_##list(net_request *req, const void *args)         \
    {                                                                   \
        const net_args_##list *a = args;                                \
        return net_build_##list(req, a);                                \
    }
#define COMMAND_OF(op)                                                  \
    static void command_##op(const void *args, ledger_command *c)       \
    {                                                                   \
        const net_args_##op *a = args;                                  \
        net_command_##op(a, c);                                         \
    }
COMMAND_OF(account_open)
COMMAND_OF(transfer)
COMMAND_OF(post)
COMMAND_OF(void)
COMMAND_OF(transfer_reverse)
COMMAND_OF(grant)
COMMAND_OF(extend)
COMMAND_OF(revoke)
COMMAND_OF(endpoint_disable)
COMMAND_OF(endpoint_enable)
COMMAND_OF(endpoint_rotate_secret)
COMMAND_OF(endpoint_recover)
COMMAND_OF(endpoint_recovered)
COMMAND_OF(endpoint_create)
COMMAND_OF(endpoint_update)
COMMAND_OF(endpoint_delete)
BUILD_OF(endpoint_get)
BUILD_OF(endpoint_attempts_record)
BUILD_OF(endpoint_attempts)
BUILD_OF(chain)
BUILD_OF(batch)
BUILD_OF(account_get)
BUILD_OF(account_history)
BUILD_OF(account_list)
BUILD_OF(transfer_get)
BUILD_OF(query)
BUILD_OF(account_transfers)
BUILD_OF(account_balances)
BUILD_OF(balance_at)
BUILD_OF(entitlement_get)
BUILD_OF(entitlement_list)
BUILD_OF(log_read)
BUILD_OF(sub_create)
BUILD_OF(sub_update)
BUILD_OF(sub_named)
BUILD_OF(sub_fetch)
BUILD_OF(sub_ack)
BUILD_OF(sub_nak)
BUILD_OF(sub_progress)
BUILD_OF(sub_park)
BUILD_OF(dlq_list)
BUILD_OF(dlq_replay)
BUILD_OF(dlq_discard)
BUILD_OF(backup)

/* An op's field rows, from its list in op_fields.h. */
#define FIELDS(list) .fields = {NET_FIELDS_##list(NET_FIELD_ROW, net_args_##list)}

/* The behaviour of each kind of row. */
#define WRITE(op) \
    .kind = NET_KIND_WRITE, FIELDS(op), .build = net_build_write, .command = command_##op, \
    .apply = net_apply_writes, .reply = net_reply_writes
#define WRITE_MEMBERS(op) \
    .kind = NET_KIND_WRITE, FIELDS(op), .build = build_##op, .apply = net_apply_writes, \
    .reply = net_reply_writes
#define READ(list, handler) .kind = NET_KIND_READ, FIELDS(list), .build = build_##list, .read = (handler)
#define READ_NOTHING(handler) .kind = NET_KIND_READ, .build = net_build_nothing, .read = (handler)
#define SUBSCRIBER(list, op) \
    .kind = NET_KIND_SUBSCRIBER, FIELDS(list), .build = build_##list, .apply = net_apply_##op, \
    .reply = net_reply_##op

const net_op net_ops[NET_OP_COUNT] = {
    [NET_OP_ACCOUNT_OPEN] = {
        .id = NET_OP_ACCOUNT_OPEN, .name = "account_open", .auth = AUTH_CLASS_WRITE, WRITE(account_open),
        .doc = "Open an account."},
    [NET_OP_TRANSFER] = {
        .id = NET_OP_TRANSFER, .name = "transfer", .auth = AUTH_CLASS_WRITE, WRITE(transfer),
        .doc = "Move an amount from one account to another, or hold it (flags bit 0)."},
    [NET_OP_POST] = {
        .id = NET_OP_POST, .name = "post", .auth = AUTH_CLASS_WRITE, WRITE(post),
        .doc = "Post (capture) a hold, fully or partly."},
    [NET_OP_VOID] = {
        .id = NET_OP_VOID, .name = "void", .auth = AUTH_CLASS_WRITE, WRITE(void),
        .doc = "Void a hold."},
    [NET_OP_GRANT] = {
        .id = NET_OP_GRANT, .name = "grant", .auth = AUTH_CLASS_WRITE, WRITE(grant),
        .doc = "Grant an entitlement (for life when neither end nor duration is given)."},
    [NET_OP_EXTEND] = {
        .id = NET_OP_EXTEND, .name = "extend", .auth = AUTH_CLASS_WRITE, WRITE(extend),
        .doc = "Extend an active or expired entitlement to a later end."},
    [NET_OP_REVOKE] = {
        .id = NET_OP_REVOKE, .name = "revoke", .auth = AUTH_CLASS_WRITE, WRITE(revoke),
        .doc = "Revoke an entitlement."},
    [NET_OP_CHAIN] = {
        .id = NET_OP_CHAIN, .name = "chain", .auth = AUTH_CLASS_WRITE, WRITE_MEMBERS(chain),
        .doc = "Apply write ops all-or-nothing under one key."},
    [NET_OP_BATCH] = {
        .id = NET_OP_BATCH, .name = "batch", .auth = AUTH_CLASS_WRITE, WRITE_MEMBERS(batch),
        .doc = "Several independent writes in one request, each with its own key and result."},
    [NET_OP_ACCOUNT_GET] = {
        .id = NET_OP_ACCOUNT_GET, .name = "account_get", .auth = AUTH_CLASS_READ,
        READ(account_get, net_read_account),
        .doc = "An account with its balances and version."},
    [NET_OP_ACCOUNT_HISTORY] = {
        .id = NET_OP_ACCOUNT_HISTORY, .name = "account_history", .auth = AUTH_CLASS_READ,
        READ(account_history, net_read_history),
        .doc = "An account's transfer events, paged by seq."},
    [NET_OP_ACCOUNT_LIST] = {
        .id = NET_OP_ACCOUNT_LIST, .name = "account_list", .auth = AUTH_CLASS_READ,
        READ(account_list, net_read_account_list),
        .doc = "Accounts with their balances and versions, paged by id."},
    [NET_OP_TRANSFER_GET] = {
        .id = NET_OP_TRANSFER_GET, .name = "transfer_get", .auth = AUTH_CLASS_READ,
        READ(transfer_get, net_read_transfer),
        .doc = "A transfer or hold."},
    [NET_OP_ENTITLEMENT_GET] = {
        .id = NET_OP_ENTITLEMENT_GET, .name = "entitlement_get", .auth = AUTH_CLASS_READ,
        READ(entitlement_get, net_read_entitlement),
        .doc = "One entitlement, its state evaluated now."},
    [NET_OP_ENTITLEMENT_LIST] = {
        .id = NET_OP_ENTITLEMENT_LIST, .name = "entitlement_list", .auth = AUTH_CLASS_READ,
        READ(entitlement_list, net_read_entitlement_list),
        .doc = "A subject's entitlements, states evaluated now."},
    [NET_OP_LOG_READ] = {
        .id = NET_OP_LOG_READ, .name = "log_read", .auth = AUTH_CLASS_READ, READ(log_read, net_read_log),
        .read_waits = net_log_read_waits,
        .doc = "Events from a seq, optionally waiting for new ones."},
    [NET_OP_STATS] = {
        .id = NET_OP_STATS, .name = "stats", .auth = AUTH_CLASS_READ, READ_NOTHING(net_read_stats),
        .doc = "Head seq, counts, inbox size, map use, subscribers' metrics."},
    [NET_OP_SUB_CREATE] = {
        .id = NET_OP_SUB_CREATE, .name = "sub_create", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(sub_create, sub_create),
        .doc = "Create a durable subscriber (an identical one existing is ok, `created` false)."},
    [NET_OP_SUB_UPDATE] = {
        .id = NET_OP_SUB_UPDATE, .name = "sub_update", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(sub_update, sub_update),
        .doc = "Change a subscriber's settings, keeping its cursor, in-flight events and dead letters."},
    [NET_OP_SUB_GET] = {
        .id = NET_OP_SUB_GET, .name = "sub_get", .auth = AUTH_CLASS_READ, READ(sub_named, net_read_sub),
        .doc = "A subscriber's metrics."},
    [NET_OP_SUB_LIST] = {
        .id = NET_OP_SUB_LIST, .name = "sub_list", .auth = AUTH_CLASS_READ, READ_NOTHING(net_read_sub_list),
        .doc = "Every subscriber's metrics, in name order."},
    [NET_OP_SUB_DELETE] = {
        .id = NET_OP_SUB_DELETE, .name = "sub_delete", .auth = AUTH_CLASS_ADMIN, SUBSCRIBER(sub_named, sub_delete),
        .doc = "Delete a subscriber with its in-flight records and dead letters."},
    [NET_OP_SUB_FETCH] = {
        .id = NET_OP_SUB_FETCH, .name = "sub_fetch", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(sub_fetch, sub_fetch),
        .apply_waits = net_sub_fetch_waits,
        .doc = "Deliver events: replays, then due redeliveries, then new events."},
    [NET_OP_SUB_ACK] = {
        .id = NET_OP_SUB_ACK, .name = "sub_ack", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(sub_ack, sub_ack),
        .doc = "Acknowledge events: `seq` (everything up to it) and/or `done`."},
    [NET_OP_SUB_NAK] = {
        .id = NET_OP_SUB_NAK, .name = "sub_nak", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(sub_nak, sub_nak),
        .doc = "Retry an in-flight event later."},
    [NET_OP_SUB_PROGRESS] = {
        .id = NET_OP_SUB_PROGRESS, .name = "sub_progress", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(sub_progress, sub_progress),
        .doc = "Still at work on in-flight events: their lease (the ack wait) starts again."},
    [NET_OP_SUB_PARK] = {
        .id = NET_OP_SUB_PARK, .name = "sub_park", .auth = AUTH_CLASS_SUBSCRIBE, SUBSCRIBER(sub_park, sub_park),
        .doc = "Move an in-flight event to the dead-letter queue."},
    [NET_OP_DLQ_LIST] = {
        .id = NET_OP_DLQ_LIST, .name = "dlq_list", .auth = AUTH_CLASS_SUBSCRIBE, READ(dlq_list, net_read_dlq),
        .doc = "A subscriber's dead letters, paged by seq."},
    [NET_OP_DLQ_REPLAY] = {
        .id = NET_OP_DLQ_REPLAY, .name = "dlq_replay", .auth = AUTH_CLASS_ADMIN, SUBSCRIBER(dlq_replay, dlq_replay),
        .doc = "Deliver dead letters again, ahead of new events."},
    [NET_OP_DLQ_DISCARD] = {
        .id = NET_OP_DLQ_DISCARD, .name = "dlq_discard", .auth = AUTH_CLASS_ADMIN, SUBSCRIBER(dlq_discard, dlq_discard),
        .doc = "Remove a dead letter."},
    [NET_OP_BACKUP] = {
        .id = NET_OP_BACKUP, .name = "backup", .auth = AUTH_CLASS_ADMIN, .kind = NET_KIND_CONTROL,
        FIELDS(backup), .build = build_backup, .control = net_control_backup,
        .doc = "An online, compacting, consistent copy of the store into a new directory on the server's machine (docs/OPERATIONS.md)."},
    [NET_OP_TRANSFER_REVERSE] = {
        .id = NET_OP_TRANSFER_REVERSE, .name = "transfer_reverse", .auth = AUTH_CLASS_WRITE,
        WRITE(transfer_reverse),
        .doc = "Reverse a posted transfer, all or part of it: a new transfer the other way, "
               "linked to it."},
    [NET_OP_ENDPOINT_DISABLE] = {
        .id = NET_OP_ENDPOINT_DISABLE, .name = "endpoint_disable", .auth = AUTH_CLASS_ADMIN,
        WRITE(endpoint_disable),
        .doc = "Disable tally-relay's endpoint: the relays stop delivering to it (an "
               "endpoint.disabled event)."},
    [NET_OP_ENDPOINT_ENABLE] = {
        .id = NET_OP_ENDPOINT_ENABLE, .name = "endpoint_enable", .auth = AUTH_CLASS_ADMIN,
        WRITE(endpoint_enable),
        .doc = "Enable a disabled endpoint of tally-relay again (an endpoint.enabled event)."},
    [NET_OP_ENDPOINT_GET] = {
        .id = NET_OP_ENDPOINT_GET, .name = "endpoint_get", .auth = AUTH_CLASS_READ,
        READ(endpoint_get, net_read_endpoint),
        .doc = "Whether tally-relay's endpoint is enabled or disabled, since when and why."},
    [NET_OP_ENDPOINT_ATTEMPTS_RECORD] = {
        .id = NET_OP_ENDPOINT_ATTEMPTS_RECORD, .name = "endpoint_attempts_record",
        .auth = AUTH_CLASS_ADMIN, SUBSCRIBER(endpoint_attempts_record, endpoint_attempts_record),
        .doc = "tally-relay's delivery attempts to an endpoint, into its attempt log (and the "
               "expired ones out)."},
    [NET_OP_ENDPOINT_ATTEMPTS] = {
        .id = NET_OP_ENDPOINT_ATTEMPTS, .name = "endpoint_attempts", .auth = AUTH_CLASS_READ,
        READ(endpoint_attempts, net_read_endpoint_attempts),
        .doc = "An endpoint's delivery attempts, newest first: time, status, latency, the "
               "response's first bytes."},
    [NET_OP_ENDPOINT_ROTATE_SECRET] = {
        .id = NET_OP_ENDPOINT_ROTATE_SECRET, .name = "endpoint_rotate_secret",
        .auth = AUTH_CLASS_ADMIN, WRITE(endpoint_rotate_secret),
        .doc = "A new signing secret for tally-relay's endpoint; the one before it signs too "
               "for overlap_s (an endpoint.secret_rotated event, without the secret)."},
    [NET_OP_ENDPOINT_SECRET_GET] = {
        .id = NET_OP_ENDPOINT_SECRET_GET, .name = "endpoint_secret_get", .auth = AUTH_CLASS_ADMIN,
        READ(endpoint_get, net_read_endpoint_secret),
        .doc = "tally-relay's endpoint's signing secrets, as endpoint_rotate_secret left them "
               "(for the relay)."},
    [NET_OP_ENDPOINT_RECOVER] = {
        .id = NET_OP_ENDPOINT_RECOVER, .name = "endpoint_recover", .auth = AUTH_CLASS_ADMIN,
        WRITE(endpoint_recover),
        .doc = "Have tally-relay resend every event since a time to the endpoint (an "
               "endpoint.recover_requested event)."},
    [NET_OP_ENDPOINT_RECOVERED] = {
        .id = NET_OP_ENDPOINT_RECOVERED, .name = "endpoint_recovered", .auth = AUTH_CLASS_ADMIN,
        WRITE(endpoint_recovered),
        .doc = "tally-relay's word that the recover asked at recover_version is done (an "
               "endpoint.recovered event)."},
    [NET_OP_ENDPOINT_CREATE] = {
        .id = NET_OP_ENDPOINT_CREATE, .name = "endpoint_create", .auth = AUTH_CLASS_ADMIN,
        WRITE(endpoint_create),
        .doc = "Define an HTTP endpoint of tally-relay in tallyd: the relays start delivering "
               "to it without a restart (an endpoint.created event)."},
    [NET_OP_ENDPOINT_UPDATE] = {
        .id = NET_OP_ENDPOINT_UPDATE, .name = "endpoint_update", .auth = AUTH_CLASS_ADMIN,
        WRITE(endpoint_update),
        .doc = "Change an endpoint defined in tallyd: its URL, types, retry schedule or timeouts "
               "(an endpoint.updated event)."},
    [NET_OP_ENDPOINT_DELETE] = {
        .id = NET_OP_ENDPOINT_DELETE, .name = "endpoint_delete", .auth = AUTH_CLASS_ADMIN,
        WRITE(endpoint_delete),
        .doc = "Remove an endpoint defined in tallyd: the relays stop delivering to it (an "
               "endpoint.deleted event)."},
    [NET_OP_ENDPOINT_LIST] = {
        .id = NET_OP_ENDPOINT_LIST, .name = "endpoint_list", .auth = AUTH_CLASS_READ,
        READ_NOTHING(net_read_endpoint_list),
        .doc = "The endpoints defined in tallyd, in name order, with their state (no secrets)."},
    [NET_OP_ACCOUNT_QUERY] = {
        .id = NET_OP_ACCOUNT_QUERY, .name = "account_query", .auth = AUTH_CLASS_READ,
        READ(query, net_read_account_query),
        .doc = "Accounts by ledger, code, user data and creation time, in creation order, "
               "paged."},
    [NET_OP_TRANSFER_QUERY] = {
        .id = NET_OP_TRANSFER_QUERY, .name = "transfer_query", .auth = AUTH_CLASS_READ,
        READ(query, net_read_transfer_query),
        .doc = "Transfers by ledger, code, user data and creation time, in creation order, "
               "paged."},
    [NET_OP_ACCOUNT_TRANSFERS] = {
        .id = NET_OP_ACCOUNT_TRANSFERS, .name = "account_transfers", .auth = AUTH_CLASS_READ,
        READ(account_transfers, net_read_transfer_query),
        .doc = "The transfers that debit or credit an account, in creation order, paged."},
    [NET_OP_ACCOUNT_BALANCES] = {
        .id = NET_OP_ACCOUNT_BALANCES, .name = "account_balances", .auth = AUTH_CLASS_READ,
        READ(account_balances, net_read_account_balances),
        .doc = "An account's balances after each transfer event in a time or seq range, "
               "paged, from its history."},
    [NET_OP_BALANCE_AT] = {
        .id = NET_OP_BALANCE_AT, .name = "balance_at", .auth = AUTH_CLASS_READ,
        READ(balance_at, net_read_balance_at),
        .doc = "An account's balances as they were at a time or a seq."},
    [NET_OP_HEALTH] = {
        .id = NET_OP_HEALTH, .name = "health", .auth = AUTH_CLASS_NONE, .kind = NET_KIND_CONTROL,
        .build = net_build_nothing, .control = net_control_health,
        .doc = "The readiness and alert checks against tallyd's thresholds (--ready-*, --writer-stall-ms, --alert-*), as GET /readyz runs them (docs/OPERATIONS.md)."},
    [NET_OP_CLUSTER_STATUS] = {
        .id = NET_OP_CLUSTER_STATUS, .name = "cluster_status", .auth = AUTH_CLASS_READ,
        .kind = NET_KIND_CONTROL, .build = net_build_nothing, .control = net_control_cluster_status,
        .doc = "Cluster mode: this node's name, its stream, the position it has applied, the stream's last seq as it last saw it, its lag, its last checkpoint and the nodes agreeing there, and whether it diverged (as GET /v1/cluster; docs/CLUSTER.md); single-node mode answers not_in_cluster_mode."},
};

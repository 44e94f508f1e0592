/*
 * ops.h — the handlers that net/ops/op_table.c puts in the op table's rows:
 * builders, read handlers, writer-side apply functions and reply encoders,
 * one room per kind of op (ops_write.c, ops_read.c, ops_sub.c,
 * ops_control.c). Internal to net/.
 */
#ifndef TALLY_NET_OPS_H
#define TALLY_NET_OPS_H

#include "net/ops/op_fields.h"

/* Each handler takes its op's struct of fields (op_fields.h); the row
 * passes it through a thunk of op_table.c that checks the type. */

/* ---- builders shared by rows ---- */
int net_request_members(net_request *req, net_list ops);     /* chain, batch (protocol.c) */
int net_build_write(net_request *req, const void *args);     /* a single write op */
int net_build_nothing(net_request *req, const void *args);   /* an op without fields */

/* ---- writes (ops_write.c) ---- */
void net_command_account_open(const net_args_account_open *a, ledger_command *c);
void net_command_transfer(const net_args_transfer *a, ledger_command *c);
void net_command_transfer_reverse(const net_args_transfer_reverse *a, ledger_command *c);
void net_command_post(const net_args_post *a, ledger_command *c);
void net_command_void(const net_args_void *a, ledger_command *c);
void net_command_grant(const net_args_grant *a, ledger_command *c);
void net_command_extend(const net_args_extend *a, ledger_command *c);
void net_command_revoke(const net_args_revoke *a, ledger_command *c);
void net_command_endpoint_disable(const net_args_endpoint_disable *a, ledger_command *c);
void net_command_endpoint_enable(const net_args_endpoint_enable *a, ledger_command *c);
void net_command_endpoint_rotate_secret(const net_args_endpoint_rotate_secret *a,
                                        ledger_command *c);
void net_command_endpoint_recover(const net_args_endpoint_recover *a, ledger_command *c);
void net_command_endpoint_recovered(const net_args_endpoint_recovered *a, ledger_command *c);
void net_command_endpoint_create(const net_args_endpoint_create *a, ledger_command *c);
void net_command_endpoint_update(const net_args_endpoint_update *a, ledger_command *c);
void net_command_endpoint_delete(const net_args_endpoint_delete *a, ledger_command *c);
void net_read_endpoint_list(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
void net_read_endpoint_secret(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
int net_build_endpoint_get(net_request *req, const net_args_endpoint_get *a);
void net_read_endpoint(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
int net_build_endpoint_attempts_record(net_request *req,
                                       const net_args_endpoint_attempts_record *a);
int net_apply_endpoint_attempts_record(store_txn *t, const net_request *req, int64_t now_ms,
                                       bool in_place, net_result *res);
void net_reply_endpoint_attempts_record(net_out *o, store_txn *rt, const net_request *req,
                                        const net_result *res, int fault, int64_t now_ms);
int net_build_endpoint_attempts(net_request *req, const net_args_endpoint_attempts *a);
void net_read_endpoint_attempts(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
int net_build_chain(net_request *req, const net_args_chain *a);
int net_build_batch(net_request *req, const net_args_batch *a);
int net_apply_writes(store_txn *t, const net_request *req, int64_t now_ms, bool in_place,
                     net_result *res);
void net_reply_writes(net_out *o, store_txn *rt, const net_request *req, const net_result *res,
                      int fault, int64_t now_ms);

/* ---- reads (ops_read.c) ---- */
int net_build_account_get(net_request *req, const net_args_account_get *a);
int net_build_account_history(net_request *req, const net_args_account_history *a);
int net_build_account_list(net_request *req, const net_args_account_list *a);
int net_build_transfer_get(net_request *req, const net_args_transfer_get *a);
int net_build_entitlement_get(net_request *req, const net_args_entitlement_get *a);
int net_build_entitlement_list(net_request *req, const net_args_entitlement_list *a);
int net_build_log_read(net_request *req, const net_args_log_read *a);
void net_read_account(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
void net_read_history(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
void net_read_account_list(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
void net_read_transfer(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
void net_read_entitlement(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
void net_read_entitlement_list(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
void net_read_log(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
bool net_log_read_waits(const net_request *req, uint64_t *watermark);
void net_read_stats(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);

/* ---- queries (ops_query.c) ---- */
int net_build_query(net_request *req, const net_args_query *a);
int net_build_account_transfers(net_request *req, const net_args_account_transfers *a);
void net_read_account_query(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
void net_read_transfer_query(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
/* A time range's bounds (Unix ms, 0: none): TALLY_ok or a refusal
 * (value_out_of_range) recorded in req, naming the field. */
int net_check_time_range(net_request *req, int64_t timestamp_min_ms, int64_t timestamp_max_ms);
int net_build_account_balances(net_request *req, const net_args_account_balances *a);
int net_build_balance_at(net_request *req, const net_args_balance_at *a);
void net_read_account_balances(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
void net_read_balance_at(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);

/* ---- subscribers (ops_sub.c) ---- */
int net_build_sub_create(net_request *req, const net_args_sub_create *a);
int net_build_sub_update(net_request *req, const net_args_sub_update *a);
int net_build_sub_named(net_request *req, const net_args_sub_named *a);
int net_build_sub_fetch(net_request *req, const net_args_sub_fetch *a);
int net_build_sub_ack(net_request *req, const net_args_sub_ack *a);
int net_build_sub_nak(net_request *req, const net_args_sub_nak *a);
int net_build_sub_progress(net_request *req, const net_args_sub_progress *a);
int net_build_sub_park(net_request *req, const net_args_sub_park *a);
int net_build_dlq_list(net_request *req, const net_args_dlq_list *a);
int net_build_dlq_replay(net_request *req, const net_args_dlq_replay *a);
int net_build_dlq_discard(net_request *req, const net_args_dlq_discard *a);
#define NET_SUB_WRITE(op)                                                                   \
    int net_apply_##op(store_txn *t, const net_request *req, int64_t now_ms, bool in_place,    \
                       net_result *res);                                                      \
    void net_reply_##op(net_out *o, store_txn *rt, const net_request *req,                    \
                        const net_result *res, int fault, int64_t now_ms)
NET_SUB_WRITE(sub_create);
NET_SUB_WRITE(sub_update);
NET_SUB_WRITE(sub_delete);
NET_SUB_WRITE(sub_fetch);
NET_SUB_WRITE(sub_ack);
NET_SUB_WRITE(sub_nak);
NET_SUB_WRITE(sub_progress);
NET_SUB_WRITE(sub_park);
NET_SUB_WRITE(dlq_replay);
NET_SUB_WRITE(dlq_discard);
#undef NET_SUB_WRITE
bool net_sub_fetch_waits(const net_request *req, const net_result *res, uint64_t *watermark);
void net_read_sub(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
void net_read_sub_list(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
void net_read_dlq(net_out *o, store_txn *t, const net_request *req, int64_t now_ms);
/* "subscribers": the array of every subscriber's metrics (the key is the
 * caller's). */
void net_pack_subscribers(net_out *o, store_txn *t, int64_t now_ms);

/* ---- control (ops_control.c) ---- */
int net_build_backup(net_request *req, const net_args_backup *a);
void net_control_backup(net_out *o, const net_control_env *env, const net_request *req);
void net_control_health(net_out *o, const net_control_env *env, const net_request *req);
void net_control_cluster_status(net_out *o, const net_control_env *env, const net_request *req);

#endif

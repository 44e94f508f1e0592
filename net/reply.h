/*
 * reply.h — encoding replies: errors, write outcomes and read results
 * (docs/PROTOCOL.md, "Replies").
 */
#ifndef TALLY_NET_REPLY_H
#define TALLY_NET_REPLY_H

#include "net/protocol.h"

#include <msgpack.h>

/* A reply map of entries entries, its first two packed: "v" and "code". */
int net_reply_head(msgpack_packer *pk, size_t entries, int code);

/* {"v":1, "code": name, "message": detail}. */
int net_reply_error(msgpack_packer *pk, int code, const char *detail);

/* The reply to a decoded write request; outcomes[i] belongs to
 * req->writes[i]. A fault in faults[i] (non-zero) replaces that outcome. */
int net_reply_write(msgpack_packer *pk, const net_request *req, const ledger_outcome *outcomes,
                    const int *faults);

/* Execute a read op in the read-only txn t at now_ms and pack its reply.
 * Returns 0 when packed; a pack failure returns non-zero. */
int net_reply_read(msgpack_packer *pk, store_txn *t, const net_request *req, int64_t now_ms);

/* The account, transfer and entitlement maps of replies. */
int net_pack_account(msgpack_packer *pk, const ledger_account *a);

#endif

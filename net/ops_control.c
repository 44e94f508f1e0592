/*
 * ops_control.c — ops that run beside the reader and the writer: backup
 * (an online copy in LMDB's own read transaction; the writer goes on) and
 * health (tallyd's health checks, which need its thresholds).
 */
#include "net/ops.h"

#include "common/clock.h"
#include "common/error.h"
#include "net/health.h"
#include "net/logging.h"

#include <stdlib.h>
#include <string.h>

int net_build_backup(net_request *req, const net_fields *fs)
{
    memset(&req->read, 0, sizeof(req->read));
    req->read.path = net_fields_str(fs, "path");
    return TALLY_ok;
}

void net_control_backup(net_out *o, const net_control_env *env, const net_request *req)
{
    char path[TALLY_PATH_BYTES_MAX];
    tally_str p = req->read.path;
    if (p.len == 0 || p.len >= sizeof(path) || memchr(p.ptr, '\0', p.len))
        return net_reply_error(o, TALLY_backup_destination_invalid, "an absolute directory path");
    memcpy(path, p.ptr, p.len);
    path[p.len] = '\0';
    if (env->st == NULL)
        return net_reply_error(o, TALLY_shutting_down, "server is stopping, retry later");
    uint64_t bytes = 0;
    int rc = store_backup(env->st, path, env->backup_dir, &bytes);
    if (rc != TALLY_ok) {
        static const char *const why[] = {"the destination exists; backups go to a new directory",
                                          "the destination must be an absolute path whose parent "
                                          "exists (below --backup-dir when tallyd has one)"};
        return net_reply_error(o, rc, rc == TALLY_backup_destination_exists     ? why[0]
                                      : rc == TALLY_backup_destination_invalid ? why[1]
                                                                               : "backup failed");
    }
    net_log(NET_LOG_INFO, "backup written to %s (%llu bytes)", path, (unsigned long long)bytes);
    net_reply_open(o, TALLY_ok);
    net_kv_cstr(o, "path", path);
    net_kv_u64(o, "bytes", bytes);
    net_map_end(o);
}

void net_control_health(net_out *o, const net_control_env *env, const net_request *req)
{
    (void)req;
    store_txn t;
    net_health_report *r = NULL;
    if (env->st == NULL)
        return net_reply_error(o, TALLY_shutting_down, "server is stopping, retry later");
    int rc = env->health ? store_txn_begin(env->st, NULL, true, &t) : TALLY_internal;
    if (rc == TALLY_ok) {
        rc = net_health_evaluate(env->health, &t, clock_wall_ms(), &r);
        store_txn_abort(&t);
    }
    if (rc != TALLY_ok)
        return net_reply_error(o, rc, "health checks not run");
    net_reply_open(o, TALLY_ok);
    net_kv_bool(o, "healthy", r->failing == 0);
    net_key(o, "checks");
    net_array_begin(o);
    for (unsigned i = 0; i < r->count; i++) {
        const net_check *k = &r->checks[i];
        net_item(o);
        net_map_begin(o);
        net_kv_cstr(o, "check", net_check_name(k->kind));
        if (k->subscriber[0])
            net_kv_cstr(o, "subscriber", k->subscriber);
        else
            net_kv_nil(o, "subscriber");
        net_kv_bool(o, "ok", !k->failing);
        net_kv_u64(o, "value", k->value);
        net_kv_u64(o, "threshold", k->threshold);
        net_kv_cstr(o, "reason", k->reason);
        net_map_end(o);
    }
    net_array_end(o);
    net_map_end(o);
    free(r);
}

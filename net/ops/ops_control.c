/*
 * ops_control.c — ops that run beside the reader and the writer: backup
 * (an online copy in LMDB's own read transaction; the writer goes on) and
 * health (tallyd's health checks, which need its thresholds: the env
 * brings them) and cluster_status (this node's place in the command
 * stream, from the server's state: the env brings it).
 */
#include "net/ops/ops.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/logging.h"

#include <string.h>

int net_build_backup(net_request *req, const net_args_backup *a)
{
    memset(&req->read, 0, sizeof(req->read));
    req->read.path = a->path;
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
    char why[TALLY_PATH_BYTES_MAX + 128] = "backup failed";
    int rc = store_backup(env->st, path, env->backup_dir, &bytes, why, sizeof(why));
    if (rc != TALLY_ok) {
        net_log(NET_LOG_WARN, "backup to %s refused: %s: %s", path, tally_strerror(rc), why);
        return net_reply_error(o, rc, why);
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
    if (env->st == NULL)
        return net_reply_error(o, TALLY_shutting_down, "server is stopping, retry later");
    if (env->health == NULL)
        return net_reply_error(o, TALLY_internal, "health checks not run");
    env->health(o, env->health_ctx, env->st);
}

void net_control_cluster_status(net_out *o, const net_control_env *env, const net_request *req)
{
    (void)req;
    if (env->cluster == NULL)
        return net_reply_error(o, TALLY_not_in_cluster_mode, "tallyd runs single-node (no --cluster)");
    env->cluster(o, env->cluster_ctx);
}

/*
 * slot.c — a slot's life in the engine: decode the request its transport
 * received against the op table, check it, dispatch it by its row's kind,
 * and hand the reply to its transport (see engine.h for who owns a slot
 * when).
 */
#include "net/engine/engine.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/limits.h"
#include "net/metrics/metrics.h"

#include "common/msgpack_safe.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

void slot_own(slot *s, slot_owner from, slot_owner to)
{
    int was = atomic_exchange(&s->owner, (int)to);
    assert(was == (int)from && "a slot passed on by a thread that did not hold it");
    (void)was;
    (void)from;
}

/* Send the reply (or, if it could not be built, nothing: logged) by the
 * slot's transport and free the request message the decoded request
 * borrowed from. The slot returns to its transport. */
/* reply, a msgpack map, with one more entry: cluster_seq = seq. Returns
 * the new message (reply is freed), or reply unchanged when it is no map
 * or the entry does not fit (logged). */
static nng_msg *reply_add_cluster_seq(nng_msg *reply, uint64_t seq)
{
    const uint8_t *b = nng_msg_body(reply);
    size_t len = nng_msg_len(reply), header;
    uint32_t count;
    if (len >= 1 && (b[0] & 0xf0) == 0x80)
        count = b[0] & 0x0f, header = 1;
    else if (len >= 3 && b[0] == 0xde)
        count = (uint32_t)b[1] << 8 | b[2], header = 3;
    else if (len >= 5 && b[0] == 0xdf)
        count = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4], header = 5;
    else
        return reply;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    nng_msg *out = NULL;
    if (msgpack_pack_map(&pk, count + 1) == 0 &&
        msgpack_sbuffer_write(&sb, (const char *)b + header, len - header) == 0 &&
        msgpack_safe_pack_cstr(&pk, "cluster_seq") == 0 && msgpack_pack_uint64(&pk, seq) == 0 &&
        sb.size <= TALLY_REPLY_BYTES_MAX && nng_msg_alloc(&out, 0) == 0 &&
        nng_msg_append(out, sb.data, sb.size) != 0) {
        nng_msg_free(out);
        out = NULL;
    }
    msgpack_sbuffer_destroy(&sb);
    if (out == NULL) {
        net_log(NET_LOG_WARN, "reply sent without its cluster_seq %llu: no room",
                (unsigned long long)seq);
        return reply;
    }
    nng_msg_free(reply);
    return out;
}

static void slot_send(slot *s, slot_owner from, nng_msg *reply)
{
    slot_own(s, from, OWNER_NNG);
    if (reply && s->cluster_seq)
        reply = reply_add_cluster_seq(reply, s->cluster_seq);
    s->cluster_seq = 0;
    s->min_seq_wait = false; /* a slot answered while parked (a stop) is reused clean */
    net_request_reset(&s->req);
    if (s->msg) {
        nng_msg_free(s->msg);
        s->msg = NULL;
    }
    s->way->answer(s, reply);
}

static nng_msg *error_reply(int code, const char *detail)
{
    net_out o;
    if (net_out_begin(&o) != 0)
        return NULL;
    net_reply_error(&o, code, detail);
    return net_out_take(&o);
}

void slot_send_error(slot *s, slot_owner from, int code, const char *detail)
{
    if (s->outside_answer) {
        slot_own(s, from, OWNER_NNG);
        s->outside_answer(s, code);
        return;
    }
    slot_send(s, from, error_reply(code, detail));
}


/* A read's reply that could not be built (too large, a read failed) is
 * answered with internal. */
static void send_built(slot *s, slot_owner from, net_out *o)
{
    nng_msg *m = net_out_take(o);
    if (m == NULL)
        slot_send_error(s, from, TALLY_internal, "reply too large or read failed");
    else
        slot_send(s, from, m);
}

/* Build a reply in a read-only snapshot: a read, or a subscriber write
 * after its group's commit. */
static void send_snapshot(slot *s, slot_owner from, int fault, int64_t now_ms)
{
    server *srv = s->srv;
    store_txn t;
    if (srv->cluster && s->req.op->kind == NET_KIND_READ) { /* what the snapshot holds at least */
        pthread_mutex_lock(&srv->mu);
        s->cluster_seq = srv->cluster_position;
        pthread_mutex_unlock(&srv->mu);
    }
    pthread_rwlock_rdlock(&srv->store_rw);
    int rc = srv->store_closed ? TALLY_shutting_down : store_txn_begin(srv->st, NULL, true, &t);
    if (rc != TALLY_ok) {
        pthread_rwlock_unlock(&srv->store_rw);
        slot_send_error(s, from, rc, rc == TALLY_shutting_down ? "server is stopping, retry later"
                                                               : "cannot begin a read transaction");
        return;
    }
    net_out o;
    if (net_out_begin(&o) == 0) {
        const net_op *op = s->req.op;
        if (op->kind == NET_KIND_READ)
            op->read(&o, &t, &s->req, now_ms);
        else
            op->reply(&o, &t, &s->req, &s->res, fault, now_ms);
    } else {
        o.msg = NULL;
        o.bad = true;
    }
    store_txn_abort(&t);
    pthread_rwlock_unlock(&srv->store_rw);
    send_built(s, from, &o);
}

void slot_send_read(slot *s, slot_owner from) { send_snapshot(s, from, TALLY_ok, clock_wall_ms()); }

/* The commands of a committed write that were answered with a fault (a
 * fault of the whole group is logged by the writer). Only here, once the
 * answer is final: a command that met a full map is applied again after
 * the map has grown (net/engine/writer.c). */
static void log_unapplied(const slot *s, int fault)
{
    if (fault != TALLY_ok || s->req.op->kind == NET_KIND_SUBSCRIBER)
        return;
    for (uint32_t i = 0; i < s->req.write_count; i++)
        if (s->res.faults[i] != TALLY_ok)
            net_log(NET_LOG_WARN, "command not applied: %s", tally_strerror(s->res.faults[i]));
}

void slot_send_written(slot *s, slot_owner from, int fault, int64_t now_ms)
{
    log_unapplied(s, fault);
    if (s->outside_answer) {
        net_metrics_written_refusals(&s->req, &s->res, fault);
        slot_own(s, from, OWNER_NNG);
        s->outside_answer(s, fault);
        return;
    }
    if (s->req.op->kind == NET_KIND_SUBSCRIBER) {
        net_metrics_written(&s->req, &s->res, fault);
        send_snapshot(s, from, fault, clock_wall_ms());
        return;
    }
    /* A write's reply that cannot be built goes unanswered (logged): the
     * write may be durable, and internal would tell the caller it was
     * not; a retry with the same key gets the stored outcome. */
    net_out o;
    if (net_out_begin(&o) != 0) {
        slot_send(s, from, NULL);
        return;
    }
    s->req.op->reply(&o, NULL, &s->req, &s->res, fault, now_ms);
    net_metrics_written(&s->req, &s->res, fault);
    slot_send(s, from, net_out_take(&o));
}

void server_cluster_status(net_out *o, void *ctx)
{
    server *srv = ctx;
    pthread_mutex_lock(&srv->mu);
    uint64_t position = srv->cluster_position, last = srv->cluster_stream_last;
    uint64_t checkpoint = srv->cluster_checkpoint_seq;
    unsigned agreeing = srv->cluster_checkpoint_agreeing, nodes = srv->cluster_checkpoint_nodes;
    pthread_mutex_unlock(&srv->mu);
    bool diverged = atomic_load(&srv->cluster_diverged);
    net_reply_open(o, TALLY_ok);
    net_kv_cstr(o, "node", srv->opt->cluster_node);
    net_kv_cstr(o, "stream", srv->opt->cluster_stream);
    net_kv_u64(o, "position", position);
    net_kv_u64(o, "stream_last_seq", last);
    net_kv_u64(o, "lag_messages", last > position ? last - position : 0);
    net_kv_u64(o, "checkpoint_position", checkpoint);
    net_kv_u64(o, "checkpoint_agreeing", agreeing);
    net_kv_u64(o, "checkpoint_nodes", nodes);
    net_kv_bool(o, "diverged", diverged);
    if (diverged)
        net_kv_cstr(o, "diverged_why", srv->cluster_stop_why);
    net_map_end(o);
}

/* Control ops run on the NNG thread (the loop's control thread for the
 * tcp:// loop), beside reader and writer (the store is NULL to them once
 * it is closed). A reply that cannot be built goes unanswered (logged). */
void slot_send_control(slot *s)
{
    server *srv = s->srv;
    net_out o;
    if (net_out_begin(&o) != 0) {
        slot_send(s, OWNER_NNG, NULL);
        return;
    }
    pthread_rwlock_rdlock(&srv->store_rw);
    net_control_env env = {srv->store_closed ? NULL : srv->st, srv->opt->backup_dir,
                           net_health_reply, srv->health,
                           srv->cluster ? server_cluster_status : NULL, srv};
    s->req.op->control(&o, &env, &s->req);
    pthread_rwlock_unlock(&srv->store_rw);
    slot_send(s, OWNER_NNG, net_out_take(&o));
}

void slot_enqueue_write(slot *s, slot_owner from)
{
    server *srv = s->srv;
    pthread_mutex_lock(&srv->mu);
    int refuse = srv->stopping                              ? TALLY_shutting_down
                 : srv->queued >= TALLY_QUEUE_REQUESTS_MAX ? TALLY_overloaded
                                                           : TALLY_ok;
    if (refuse == TALLY_ok) {
        slot_own(s, from, OWNER_QUEUE);
        s->next = NULL;
        if (srv->queue_tail)
            srv->queue_tail->next = s;
        else
            srv->queue_head = s;
        srv->queue_tail = s;
        if (srv->queued++ == 0)
            srv->writer_progress_ms = clock_mono_ms(); /* work waits from now on */
        atomic_fetch_add_explicit(&srv->enqueued, 1, memory_order_release);
        pthread_cond_signal(&srv->writer_cv);
    }
    pthread_mutex_unlock(&srv->mu);
    if (refuse == TALLY_ok)
        return;
    net_metrics_refused(refuse);
    slot_send_error(s, from, refuse, refuse == TALLY_overloaded ? "write queue full, retry later"
                                                                : "server is stopping, retry later");
}

/* A read with min_seq waits (parked) until the node's position reaches
 * it, up to --cluster-read-wait-ms; past that, not_caught_up. */
void slot_dispatch_read(slot *s, slot_owner from)
{
    server *srv = s->srv;
    uint64_t watermark;
    if (srv->cluster && atomic_load_explicit(&srv->cluster_diverged, memory_order_acquire)) {
        slot_send_error(s, from, TALLY_cluster_diverged, srv->cluster_stop_why);
        return;
    }
    if (s->req.min_seq > 0) {
        pthread_mutex_lock(&srv->mu);
        uint64_t position = server_position_locked(srv);
        pthread_mutex_unlock(&srv->mu);
        if (position < s->req.min_seq && srv->opt->cluster_read_wait_ms > 0) {
            s->min_seq_wait = true;
            slot_park(s, from, srv->opt->cluster_read_wait_ms);
            return;
        }
        if (position < s->req.min_seq) {
            char detail[96];
            snprintf(detail, sizeof(detail), "this node is at position %llu, not yet %llu",
                     (unsigned long long)position, (unsigned long long)s->req.min_seq);
            slot_send_error(s, from, TALLY_not_caught_up, detail);
            return;
        }
    }
    if (s->req.op->read_waits && s->req.op->read_waits(&s->req, &watermark)) {
        pthread_mutex_lock(&srv->mu);
        bool nothing_yet = !srv->stopping && srv->head_seq <= watermark;
        pthread_mutex_unlock(&srv->mu);
        if (nothing_yet) {
            s->watermark = watermark;
            slot_park(s, from, s->req.wait_ms);
            return;
        }
    }
    slot_send_read(s, from);
}

/* With --auth: the token before anything else (a refusal of the
 * request's fields is told only to a known principal), then the grant the
 * op's row asks for. false: refused and answered (nothing stored). */
static bool slot_authorized(slot *s, int decoded)
{
    const net_request *req = &s->req;
    bool known = decoded == TALLY_ok;
    if (!known && !req->has_auth && !req->op &&
        (decoded == TALLY_malformed_request || decoded == TALLY_unsupported_version))
        return true; /* not a request map at all: no token to check, nothing to run */
    auth_request rq = {req->has_auth, req->auth, known ? req->op->auth : AUTH_CLASS_READ,
                       {NULL, 0}, known ? req->op->name : NULL};
    if (known && rq.cls == AUTH_CLASS_WRITE)
        rq.name = req->consumer;
    else if (known && rq.cls == AUTH_CLASS_SUBSCRIBE)
        rq.name = req->sub.name;
    char detail[96];
    int rc = auth_guard_check(s->srv->auth, &rq, detail, sizeof(detail));
    if (rc == TALLY_ok)
        return true;
    net_metrics_auth_refused(rc);
    slot_send_error(s, OWNER_NNG, rc, detail);
    return false;
}

/* Whether s's request came from the JSON API (net/http/http_json.c), the
 * one sender over inproc: its batch members may carry keys tallyd
 * derived (NET_DERIVED_KEY_PREFIX), which clients may not send. */
static bool slot_from_inproc(const slot *s)
{
    nng_pipe p = nng_msg_get_pipe(s->msg);
    nng_sockaddr sa;
    return nng_pipe_id(p) > 0 && nng_pipe_get_addr(p, NNG_OPT_LOCADDR, &sa) == 0 &&
           sa.s_family == NNG_AF_INPROC;
}

void slot_serve(slot *s)
{
    s->state = SLOT_BUSY;
    s->timed_kind = -1;
    size_t len = nng_msg_len(s->msg);
    if (len > TALLY_REQUEST_BYTES_MAX) {
        net_metrics_request_invalid();
        slot_send_error(s, OWNER_NNG, TALLY_request_too_large, "requests are at most 512 KiB");
        return;
    }
    int rc = net_request_decode(&s->req, nng_msg_body(s->msg), len);
    if (s->srv->auth && !slot_authorized(s, rc))
        return;
    if (rc == TALLY_ok && net_request_has_derived_key(&s->req) && !slot_from_inproc(s))
        rc = net_request_fail(&s->req, TALLY_malformed_request, NET_DERIVED_KEY_REFUSAL);
    if (rc != TALLY_ok && s->req.op)
        net_metrics_request(s->req.op->id); /* a known op with bad fields */
    else if (rc != TALLY_ok)
        net_metrics_request_invalid();
    if (rc != TALLY_ok) {
        net_log(NET_LOG_DEBUG, "refused request: %s (%s)", tally_strerror(rc), s->req.error_detail);
        slot_send_error(s, OWNER_NNG, rc, s->req.error_detail);
        return;
    }
    net_metrics_request(s->req.op->id);
    if (s->req.wait_ms > 0 && s->way && s->way->long_poll_begin && !s->way->long_poll_begin(s)) {
        s->req.wait_ms = 0; /* a page now, maybe empty: the client polls again */
        net_metrics_long_poll_refused();
    }
    if (s->req.wait_ms > 0) /* long-polls only: no clock read on the write path */
        s->until_ms = clock_mono_ms() + s->req.wait_ms;
    else /* observed when its reply leaves (slot_callback) */
        s->timed_kind = s->req.op->kind == NET_KIND_READ || s->req.op->kind == NET_KIND_CONTROL
                            ? NET_REQUEST_READ
                            : NET_REQUEST_WRITE;
    switch (s->req.op->kind) {
    case NET_KIND_WRITE:
    case NET_KIND_SUBSCRIBER: slot_enqueue_write(s, OWNER_NNG); return;
    case NET_KIND_CONTROL:
        s->way->control(s);
        return;
    case NET_KIND_READ: slot_dispatch_read(s, OWNER_NNG); return;
    }
}

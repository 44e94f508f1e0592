/*
 * subscriber.c — durable subscribers in libtally (tally.h, "durable
 * subscribers"; docs/SUBSCRIBERS.md): opening one, the run loop that feeds
 * a handler, deletion and the dead-letter queue (a subscriber's metrics,
 * settings, in-flight events and partitions: subscriber_info.c).
 *
 * The server keeps all the state (ack floor, in-flight deliveries with
 * their attempts, dead letters); a handle keeps only its name, whether its
 * next fetch asks for the unacked window at once (restart), a stop flag
 * and counters. The run loop fetches a batch, hands each event to the
 * handler in order, sends a nak or a park the moment the handler answers
 * so, and acknowledges the batch's done events with one sub_ack. Every op
 * is idempotent on the server, so a round trip that failed is simply sent
 * again, a bounded number of times in a row.
 */
#include "clients/libtally/libtally_internal.h"
#include "common/limits.h"

#include <nng/supplemental/util/platform.h>
#include <stdatomic.h>
#include <stdlib.h>

/* Pause after a failed round trip: doubles from min to max. */
#define RUN_PAUSE_MS_MIN 100
#define RUN_PAUSE_MS_MAX 5000
#define PARK_REASON_DEFAULT "parked by the handler"

_Static_assert(TALLY_CLIENT_SUBSCRIBER_NAME_BYTES_MAX == TALLY_SUBSCRIBER_NAME_BYTES_MAX &&
                   TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX == TALLY_SUB_BACKOFF_STEPS_MAX &&
                   TALLY_CLIENT_SUB_ERROR_BYTES_MAX == TALLY_SUB_ERROR_BYTES_MAX &&
                   TALLY_CLIENT_SUB_FETCH_MAX == TALLY_SUB_FETCH_EVENTS_MAX &&
                   TALLY_CLIENT_SUB_FETCH_DEFAULT == TALLY_SUB_FETCH_EVENTS_DEFAULT,
               "client limits as the server's");
_Static_assert(TALLY_CLIENT_SUB_FETCH_MAX <= TALLY_SUB_ACK_SEQS_MAX,
               "a whole fetched batch is acknowledged with one sub_ack");
_Static_assert(TALLY_CLIENT_SUB_FETCH_MAX == TALLY_DLQ_LIST_ENTRIES_MAX &&
                   TALLY_CLIENT_SUB_FETCH_DEFAULT == TALLY_DLQ_LIST_ENTRIES_DEFAULT,
               "a dlq page is as large as a fetch");
_Static_assert(TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX == TALLY_SUB_INSTANCE_BYTES_MAX &&
                   TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX >= 36,
               "an instance id as the server's, and a UUID text fits one");
_Static_assert(TALLY_CLIENT_SUB_PARTITIONS_MAX == TALLY_SUB_PARTITIONS_MAX,
               "partitions as the server's");
_Static_assert(TALLY_CLIENT_SUB_WAIT_MS_MAX <= TALLY_LOG_WAIT_MS_MAX,
               "a fetch waits within the server's long-poll limit");

struct tally_subscriber {
    tally_client *client;
    char name[TALLY_CLIENT_SUBSCRIBER_NAME_BYTES_MAX + 1];
    bool created;
    bool restart; /* the next fetch makes the instance's in-flight events due now */
    char instance[TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX + 1]; /* sub_fetch's instance */
    atomic_bool stop;
    atomic_bool running;
    client_chain chain; /* the last event fetched (its seq and hash) */
    nng_mtx *mu;        /* guards counters */
    tally_subscriber_counters counters;
};

/* A request whose reply only needs to be ok. */
static int plain_exchange(tally_client *c, const fields *fs)
{
    reply r;
    int rc = client_read_exchange(c, fs, 0, &r);
    if (rc == TALLY_ok)
        client_reply_free(&r);
    return rc;
}

int tally_subscriber_delete(tally_client *c, const char *name)
{
    if (c == NULL || !client_sub_name_ok(name))
        return TALLY_invalid_argument;
    fields fs;
    client_sub_fields(&fs, "sub_delete", name);
    return plain_exchange(c, &fs);
}

/* ---- opening ---- */

_Static_assert(TALLY_CLIENT_SUB_MAX_DELIVER_DEFAULT == TALLY_SUB_MAX_DELIVER_DEFAULT &&
                   TALLY_CLIENT_SUB_ACK_WAIT_MS_DEFAULT == TALLY_SUB_ACK_WAIT_MS_DEFAULT &&
                   TALLY_CLIENT_SUB_MAX_ACK_PENDING_DEFAULT == TALLY_SUB_MAX_ACK_PENDING_DEFAULT,
               "the client says the server's defaults");

static bool options_valid(const tally_subscriber_options *o)
{
    return (unsigned)o->start <= TALLY_START_TIME &&
           o->backoff_count <= TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX;
}

/* sub_create's fields; backoff (capacity 8) holds the backoff list. */
static void create_fields(fields *fs, const char *name, const tally_subscriber_options *o,
                          uint64_t *backoff)
{
    client_sub_fields(fs, "sub_create", name);
    if (o == NULL)
        return;
    switch (o->start) {
    case TALLY_START_BEGINNING: break; /* the default */
    case TALLY_START_NOW: put_str(fs, "start", "now"); break;
    case TALLY_START_SEQ: put_uint(fs, "from_seq", o->from_seq); break;
    case TALLY_START_TIME: put_int(fs, "from_time_ms", o->from_time_ms); break;
    }
    if (o->max_deliver)
        put_uint(fs, "max_deliver", o->max_deliver);
    if (o->ack_wait_ms)
        put_uint(fs, "ack_wait_ms", o->ack_wait_ms);
    if (o->max_ack_pending)
        put_uint(fs, "max_ack_pending", o->max_ack_pending);
    for (uint32_t i = 0; i < o->backoff_count; i++)
        backoff[i] = o->backoff_ms[i];
    if (o->backoff_count)
        put_uints(fs, "backoff_ms", backoff, o->backoff_count);
    if (o->partitions > 1)
        put_uint(fs, "partitions", o->partitions);
    if (o->filter_types && o->filter_types[0])
        put_str(fs, "filter_types", o->filter_types);
}

/* Find or create the subscriber for tally_subscriber_open. */
static int subscriber_attach(tally_subscriber *s, const tally_subscriber_options *o)
{
    tally_subscriber_info info;
    uint64_t backoff[TALLY_CLIENT_SUB_BACKOFF_STEPS_MAX];
    fields fs;
    int rc = TALLY_subscriber_not_found;
    if (o == NULL) { /* as it is, when it exists */
        client_sub_fields(&fs, "sub_get", s->name);
        rc = client_sub_info_exchange(s->client, &fs, &info, NULL);
    }
    if (rc == TALLY_subscriber_not_found) {
        create_fields(&fs, s->name, o, backoff);
        rc = client_sub_info_exchange(s->client, &fs, &info, &s->created);
    }
    return rc;
}

int tally_subscriber_open(tally_client *c, const char *name,
                          const tally_subscriber_options *options, tally_subscriber **out)
{
    if (c == NULL || !client_sub_name_ok(name) || out == NULL || (options && !options_valid(options)))
        return TALLY_invalid_argument;
    tally_subscriber *s = calloc(1, sizeof(*s));
    if (s == NULL || nng_mtx_alloc(&s->mu) != 0) {
        free(s);
        return TALLY_out_of_memory;
    }
    s->client = c;
    memcpy(s->name, name, strlen(name) + 1);
    client_chain_start(&s->chain);
    s->restart = true;
    tally_uuid id;
    int rc = tally_uuid_v7(&id); /* the instance: one per handle */
    if (rc != TALLY_ok) {
        tally_subscriber_close(s);
        return rc;
    }
    tally_uuid_format(&id, s->instance);
    atomic_init(&s->stop, false);
    atomic_init(&s->running, false);
    rc = subscriber_attach(s, options);
    if (rc != TALLY_ok) {
        tally_subscriber_close(s);
        return rc;
    }
    *out = s;
    return TALLY_ok;
}

bool tally_subscriber_created(const tally_subscriber *s)
{
    return s != NULL && s->created;
}

const char *tally_subscriber_instance(const tally_subscriber *s)
{
    return s != NULL ? s->instance : NULL;
}

void tally_subscriber_close(tally_subscriber *s)
{
    if (s == NULL)
        return;
    assert(!atomic_load(&s->running));
    nng_mtx_free(s->mu);
    free(s);
}

void tally_subscriber_stop(tally_subscriber *s)
{
    if (s != NULL)
        atomic_store(&s->stop, true);
}

void tally_subscriber_counters_get(const tally_subscriber *s, tally_subscriber_counters *out)
{
    assert(s != NULL && out != NULL);
    nng_mtx_lock(s->mu);
    *out = s->counters;
    nng_mtx_unlock(s->mu);
}

/* Add to a counter (n may be 0) or set the positions, under the lock. */
static void count(tally_subscriber *s, uint64_t *counter, uint64_t n)
{
    nng_mtx_lock(s->mu);
    *counter += n;
    nng_mtx_unlock(s->mu);
}

static void positions_set(tally_subscriber *s, uint64_t ack_floor, uint64_t head)
{
    nng_mtx_lock(s->mu);
    if (ack_floor > s->counters.ack_floor)
        s->counters.ack_floor = ack_floor;
    if (head > s->counters.head)
        s->counters.head = head;
    nng_mtx_unlock(s->mu);
}

/* ---- the run loop ---- */

typedef struct run {
    tally_subscriber *s;
    uint64_t max_events, handed; /* handed: events given to the handler in this run */
    uint32_t fetch_max, wait_ms, failures_max;
    uint32_t failures_in_row;
    bool until_idle, idle; /* idle: the last fetch brought nothing */
    tally_delivery *batch; /* fetch_max deliveries */
    size_t batch_count;
    uint64_t *done; /* seqs of the batch the handler finished */
    size_t done_count;
    tally_verdict *verdicts; /* a batch handler's answers (tally_subscriber_run_batches) */
    tally_answer *answers;
    uint64_t batch_ack_floor;
    uint32_t progress_ms; /* while handling a batch, sub_progress this often */
    nng_time lease_from;  /* when the batch's lease last (re)started */
} run;

static bool transport_fault(int rc)
{
    return rc == TALLY_timed_out || rc == TALLY_unreachable || rc == TALLY_overloaded ||
           rc == TALLY_shutting_down;
}

static bool stopping(const run *r)
{
    return atomic_load(&r->s->stop) || (r->max_events && r->handed >= r->max_events) ||
           (r->until_idle && r->idle);
}

/* Send fs until it is answered: transport faults are tried again after a
 * growing pause, up to failures_max in a row (then returned). stoppable:
 * give up (TALLY_ok, r->reply not live) once a stop was asked for. */
static int persist(run *r, const fields *fs, uint32_t extra_wait_ms, bool stoppable, reply *out,
                   bool *answered)
{
    uint32_t pause_ms = RUN_PAUSE_MS_MIN;
    *answered = false;
    for (;;) {
        int rc = client_read_exchange(r->s->client, fs, extra_wait_ms, out);
        if (!transport_fault(rc)) {
            r->failures_in_row = 0;
            *answered = rc == TALLY_ok;
            return rc;
        }
        if (++r->failures_in_row > r->failures_max)
            return rc;
        count(r->s, &r->s->counters.failures, 1);
        if (stoppable && stopping(r))
            return TALLY_ok;
        nng_msleep(pause_ms);
        pause_ms = pause_ms * 2 < RUN_PAUSE_MS_MAX ? pause_ms * 2 : RUN_PAUSE_MS_MAX;
    }
}

/* One element of a fetch: {seq, attempt, replay, event (bin)}. */
static bool delivery_decode(const msgpack_object *o, void *out)
{
    tally_delivery *d = out;
    decoder dec = decoder_of(o);
    memset(d, 0, sizeof(*d));
    uint64_t seq = dec_uint(&dec, "seq", UINT64_MAX);
    d->attempt = (uint32_t)dec_uint(&dec, "attempt", UINT32_MAX);
    d->replay = dec_bool(&dec, "replay");
    const void *bytes;
    size_t len;
    const msgpack_object *event = dec_get(&dec, "event");
    if (!dec.ok || !msgpack_safe_get_bin(event, &bytes, &len) ||
        !client_event_from_bytes(bytes, len, &d->event))
        return false;
    return d->event.seq == seq && d->attempt >= 1;
}

static void batch_release(run *r)
{
    for (size_t i = 0; i < r->batch_count; i++)
        tally_events_release(&r->batch[i].event, 1);
    r->batch_count = 0;
    r->done_count = 0;
}

/* Every fetched event that follows the one fetched before it (seq + 1, in
 * this batch or the last) must carry its hash as prev_hash. Redeliveries
 * and replays come out of order; those have nothing to compare with. */
static bool batch_chained(run *r)
{
    for (size_t i = 0; i < r->batch_count; i++) {
        if (!client_chain_follows(&r->s->chain, &r->batch[i].event))
            return false;
        client_chain_take(&r->s->chain, &r->batch[i].event);
    }
    return true;
}

static int fetch_decode(run *r, const msgpack_object *root, uint32_t max)
{
    decoder d = decoder_of(root);
    r->batch_ack_floor = dec_uint(&d, "ack_floor", UINT64_MAX);
    uint64_t head = dec_uint(&d, "head", UINT64_MAX);
    const msgpack_object *events = dec_get(&d, "events");
    if (!d.ok || events->type != MSGPACK_OBJECT_ARRAY || events->via.array.size > max)
        return TALLY_internal;
    bool ok = client_array_decode(events, delivery_decode, r->batch, sizeof(*r->batch), max,
                                  &r->batch_count);
    positions_set(r->s, r->batch_ack_floor, head);
    return !ok ? TALLY_internal : batch_chained(r) ? TALLY_ok : TALLY_corrupt_record;
}

/* Fetch the next batch into r->batch (none when a stop came first). */
static int fetch(run *r)
{
    uint64_t left = r->max_events ? r->max_events - r->handed : r->fetch_max;
    uint32_t max = left < r->fetch_max ? (uint32_t)left : r->fetch_max;
    fields fs;
    client_sub_fields(&fs, "sub_fetch", r->s->name);
    put_uint(&fs, "max", max);
    put_uint(&fs, "wait_ms", r->wait_ms);
    put_str(&fs, "instance", r->s->instance);
    if (r->s->restart)
        put_bool(&fs, "restart", true);
    reply rep;
    bool answered;
    int rc = persist(r, &fs, r->wait_ms, true, &rep, &answered);
    if (!answered) {
        r->s->restart = true; /* a lost reply may hold deliveries: get them back at once */
        return rc;
    }
    r->s->restart = false; /* the server made the instance's unacked window due */
    r->lease_from = nng_clock();
    count(r->s, &r->s->counters.fetches, 1);
    rc = fetch_decode(r, rep.root, max);
    client_reply_free(&rep);
    r->idle = r->batch_count == 0;
    if (rc != TALLY_ok)
        batch_release(r);
    return rc;
}

static int progress_send(tally_client *c, const char *name, const char *instance,
                         const uint64_t *seqs, size_t count)
{
    fields fs;
    client_sub_fields(&fs, "sub_progress", name);
    put_uints(&fs, "seqs", seqs, count);
    if (instance && instance[0])
        put_str(&fs, "instance", instance);
    reply rep;
    int rc = client_read_exchange(c, &fs, 0, &rep);
    if (rc == TALLY_ok)
        client_reply_free(&rep);
    return rc;
}

int tally_subscriber_progress(tally_subscriber *s, const uint64_t *seqs, size_t count)
{
    if (s == NULL || seqs == NULL || count == 0 || count > TALLY_CLIENT_SUB_FETCH_MAX)
        return TALLY_invalid_argument;
    return progress_send(s->client, s->name, s->instance, seqs, count);
}

/* Before handing out batch[from]: when progress_ms passed since the lease
 * of the batch (re)started, tell the server the consumer is still at work
 * on it (sub_progress): on the rest, and on the done events, which are
 * acknowledged only after the batch. So none is handed to another
 * instance while this one works through the batch. A failure is left to
 * the lease (at least once holds). */
static void progress_if_due(run *r, size_t from)
{
    nng_time now = nng_clock();
    if (r->progress_ms == 0 || now - r->lease_from < r->progress_ms || from >= r->batch_count)
        return;
    uint64_t seqs[TALLY_CLIENT_SUB_FETCH_MAX];
    size_t n = 0;
    for (size_t i = 0; i < r->done_count; i++)
        seqs[n++] = r->done[i];
    for (size_t i = from; i < r->batch_count; i++)
        seqs[n++] = r->batch[i].event.seq;
    progress_send(r->s->client, r->s->name, r->s->instance, seqs, n);
    r->lease_from = now;
}

/* Send a nak or a park for d. A seq no longer in flight is skipped. */
static int answer_send(run *r, const tally_delivery *d, tally_verdict verdict,
                       const tally_answer *a)
{
    fields fs;
    bool retry = verdict == TALLY_RETRY;
    client_sub_fields(&fs, retry ? "sub_nak" : "sub_park", r->s->name);
    put_uint(&fs, "seq", d->event.seq);
    if (retry && a->delay_set)
        put_uint(&fs, "delay_ms", a->delay_ms);
    if (retry && a->error[0])
        put_str(&fs, "error", a->error);
    if (!retry)
        put_str(&fs, "reason", a->error[0] ? a->error : PARK_REASON_DEFAULT);
    reply rep;
    bool answered;
    int rc = persist(r, &fs, 0, false, &rep, &answered);
    if (answered)
        client_reply_free(&rep);
    return rc == TALLY_seq_not_in_flight ? TALLY_ok : rc;
}

/* Acknowledge the done events of the batch: one sub_ack. */
static int ack_send(run *r)
{
    if (r->done_count == 0)
        return TALLY_ok;
    fields fs;
    client_sub_fields(&fs, "sub_ack", r->s->name);
    put_uints(&fs, "done", r->done, r->done_count);
    reply rep;
    bool answered;
    int rc = persist(r, &fs, 0, false, &rep, &answered);
    if (!answered)
        return rc;
    decoder d = decoder_of(rep.root);
    uint64_t floor = dec_uint(&d, "ack_floor", UINT64_MAX);
    client_reply_free(&rep);
    if (!d.ok)
        return TALLY_internal;
    count(r->s, &r->s->counters.acks, 1);
    positions_set(r->s, floor, 0);
    return TALLY_ok;
}

/* Count a verdict and act on it: a done seq joins the batch's ack, a retry
 * or a park is sent at once. */
static int verdict_apply(run *r, const tally_delivery *d, tally_verdict verdict,
                         tally_answer *answer)
{
    tally_subscriber *s = r->s;
    answer->error[TALLY_CLIENT_SUB_ERROR_BYTES_MAX] = '\0';
    switch (verdict) {
    case TALLY_DONE:
        r->done[r->done_count++] = d->event.seq;
        count(s, &s->counters.done, 1);
        return TALLY_ok;
    case TALLY_RETRY: count(s, &s->counters.retried, 1); break;
    case TALLY_PARK: count(s, &s->counters.parked, 1); break;
    default: return TALLY_invalid_argument; /* not a verdict */
    }
    return answer_send(r, d, verdict, answer);
}

static void count_handed(run *r, const tally_delivery *d)
{
    tally_subscriber *s = r->s;
    r->handed++;
    count(s, &s->counters.delivered, 1);
    count(s, &s->counters.redelivered, d->attempt > 1);
    count(s, &s->counters.replays, d->replay);
}

/* Hand one delivery to the handler and act on its verdict. */
static int deliver(run *r, const tally_delivery *d, tally_subscriber_handler handler, void *arg)
{
    tally_answer answer;
    memset(&answer, 0, sizeof(answer));
    count_handed(r, d);
    return verdict_apply(r, d, handler(d, &answer, arg), &answer);
}

/* Hand the whole batch to a batch handler, then act on its verdicts in
 * the batch's order. */
static int deliver_batch(run *r, tally_batch_handler handler, void *arg)
{
    for (size_t i = 0; i < r->batch_count; i++) {
        count_handed(r, &r->batch[i]);
        r->verdicts[i] = TALLY_RETRY; /* what the handler leaves unset comes again */
    }
    memset(r->answers, 0, r->batch_count * sizeof(*r->answers));
    handler(r->batch, r->batch_count, r->verdicts, r->answers, arg);
    int rc = TALLY_ok;
    for (size_t i = 0; rc == TALLY_ok && i < r->batch_count; i++)
        rc = verdict_apply(r, &r->batch[i], r->verdicts[i], &r->answers[i]);
    return rc;
}

/* One batch: fetch, hand out in order, acknowledge. */
static int run_batch(run *r, tally_subscriber_handler handler, tally_batch_handler batch_handler,
                     void *arg)
{
    int rc = fetch(r);
    if (rc == TALLY_ok && batch_handler && r->batch_count > 0)
        rc = deliver_batch(r, batch_handler, arg);
    for (size_t i = 0; handler && rc == TALLY_ok && i < r->batch_count && !stopping(r); i++) {
        progress_if_due(r, i);
        rc = deliver(r, &r->batch[i], handler, arg);
    }
    int ack_rc = ack_send(r); /* what was done is acknowledged, whatever came after */
    batch_release(r);
    return rc != TALLY_ok ? rc : ack_rc;
}

/* An instance id: 1-64 bytes of A-Z a-z 0-9 . _ - (as the server checks). */
static bool instance_ok(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static bool run_options_valid(const tally_run_options *o)
{
    return o->fetch_max <= TALLY_CLIENT_SUB_FETCH_MAX &&
           o->wait_ms <= TALLY_CLIENT_SUB_WAIT_MS_MAX &&
           o->failures_max <= TALLY_CLIENT_SUB_FAILURES_MAX &&
           (o->instance == NULL || instance_ok(o->instance));
}

/* A run given another instance id fetches as that instance from now on,
 * and first gets back at once whatever that instance holds (restart). */
static void instance_take(tally_subscriber *s, const char *id)
{
    if (id == NULL || strcmp(id, s->instance) == 0)
        return;
    memcpy(s->instance, id, strlen(id) + 1);
    s->restart = true;
}

static int run_loop(tally_subscriber *s, const tally_run_options *options,
                    tally_subscriber_handler handler, tally_batch_handler batch_handler, void *arg)
{
    static const tally_run_options defaults = {0};
    const tally_run_options *o = options ? options : &defaults;
    bool idle = false;
    if (s == NULL || (handler == NULL && batch_handler == NULL) || !run_options_valid(o) ||
        !atomic_compare_exchange_strong(&s->running, &idle, true))
        return TALLY_invalid_argument;
    instance_take(s, o->instance);
    tally_subscriber_info info;
    run r = {.s = s,
             .progress_ms = tally_subscriber_get(s->client, s->name, &info) == TALLY_ok
                                ? info.ack_wait_ms / 3
                                : TALLY_CLIENT_SUB_PROGRESS_MS_DEFAULT,
             .max_events = o->max_events,
             .fetch_max = o->fetch_max ? o->fetch_max : TALLY_CLIENT_SUB_FETCH_DEFAULT,
             .wait_ms = o->wait_ms ? o->wait_ms : TALLY_CLIENT_SUB_WAIT_MS_DEFAULT,
             .failures_max = o->failures_max ? o->failures_max : TALLY_CLIENT_SUB_FAILURES_DEFAULT,
             .until_idle = o->until_idle};
    r.batch = calloc(r.fetch_max, sizeof(*r.batch));
    r.done = calloc(r.fetch_max, sizeof(*r.done));
    if (batch_handler) {
        r.verdicts = calloc(r.fetch_max, sizeof(*r.verdicts));
        r.answers = calloc(r.fetch_max, sizeof(*r.answers));
    }
    int rc = r.batch && r.done && (!batch_handler || (r.verdicts && r.answers))
                 ? TALLY_ok
                 : TALLY_out_of_memory;
    while (rc == TALLY_ok && !stopping(&r))
        rc = run_batch(&r, handler, batch_handler, arg);
    free(r.batch);
    free(r.done);
    free(r.verdicts);
    free(r.answers);
    if (rc == TALLY_ok)
        atomic_store(&s->stop, false); /* consumed by the run it ended */
    atomic_store(&s->running, false);
    return rc;
}

int tally_subscriber_run(tally_subscriber *s, const tally_run_options *options,
                         tally_subscriber_handler handler, void *arg)
{
    return handler ? run_loop(s, options, handler, NULL, arg) : TALLY_invalid_argument;
}

int tally_subscriber_run_batches(tally_subscriber *s, const tally_run_options *options,
                                 tally_batch_handler handler, void *arg)
{
    return handler ? run_loop(s, options, NULL, handler, arg) : TALLY_invalid_argument;
}

/* ---- dead letters ---- */

static bool dead_letter_decode(const msgpack_object *o, void *out)
{
    tally_dead_letter *l = out;
    decoder d = decoder_of(o);
    memset(l, 0, sizeof(*l));
    l->seq = dec_uint(&d, "seq", UINT64_MAX);
    l->attempts = (uint32_t)dec_uint(&d, "attempts", UINT32_MAX);
    dec_str(&d, "error", l->error, sizeof(l->error));
    l->parked_ms = dec_int(&d, "parked_ms");
    l->replaying = dec_bool(&d, "replaying");
    if (dec_present(&d, "event_id")) /* nil once the event left the log */
        dec_id(&d, "event_id", &l->event_id);
    if (dec_present(&d, "type"))
        dec_str(&d, "type", l->type, sizeof(l->type));
    return d.ok;
}

int tally_dlq_list(tally_client *c, const char *name, uint64_t after_seq, uint32_t limit,
                   tally_dead_letter *out, size_t capacity, size_t *count, uint64_t *next)
{
    if (c == NULL || !client_sub_name_ok(name) || out == NULL || capacity == 0 || count == NULL ||
        next == NULL)
        return TALLY_invalid_argument;
    fields fs;
    client_sub_fields(&fs, "dlq_list", name);
    put_uint(&fs, "after_seq", after_seq);
    put_uint(&fs, "limit", client_page_limit(limit, capacity, TALLY_CLIENT_SUB_FETCH_DEFAULT,
                                             TALLY_CLIENT_SUB_FETCH_MAX));
    return client_read_page(c, &fs, dead_letter_decode, out, sizeof(*out), capacity, count,
                            next);
}

int tally_dlq_replay(tally_client *c, const char *name, uint64_t seq, uint64_t *replaying)
{
    if (c == NULL || !client_sub_name_ok(name))
        return TALLY_invalid_argument;
    fields fs;
    client_sub_fields(&fs, "dlq_replay", name);
    if (seq != 0)
        put_uint(&fs, "seq", seq);
    reply r;
    int rc = client_read_exchange(c, &fs, 0, &r);
    if (rc != TALLY_ok)
        return rc;
    decoder d = decoder_of(r.root);
    uint64_t n = dec_uint(&d, "replaying", UINT64_MAX);
    client_reply_free(&r);
    if (d.ok && replaying != NULL)
        *replaying = n;
    return d.ok ? TALLY_ok : TALLY_internal;
}

int tally_dlq_discard(tally_client *c, const char *name, uint64_t seq)
{
    if (c == NULL || !client_sub_name_ok(name) || seq == 0)
        return TALLY_invalid_argument;
    fields fs;
    client_sub_fields(&fs, "dlq_discard", name);
    put_uint(&fs, "seq", seq);
    return plain_exchange(c, &fs);
}

/*
 * stream.c — tally-bench --stream: how fast a libtally subscriber catches
 * up. One tally_stream (clients/tally.h) reads the log from --from-seq
 * (default 1) up to the head the server had when the run began (or --ops
 * events), with a handler that does nothing but release each event. The
 * stream checks every event's hash and its chain to the one before, so
 * what is measured is a real, verified read of the log.
 *
 * Verified when every event from the first seq to the last came, each
 * exactly one more than the one before (the stream's own guarantee, checked
 * again here).
 */
#include "config.h"

#include "common/progress.h"
#include "tools/bench/bench.h"

#include "common/clock.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct stream_result {
    uint64_t first, last, events, out_of_order;
    int64_t elapsed_ns;
    double client_cpu_s, server_cpu_s;
    int error; /* TALLY_ok, or the code that stopped the read */
} stream_result;

static void stream_read(const bench *b, tally_client *c, uint64_t until, stream_result *r)
{
    const bench_options *o = &b->opt;
    tally_stream *s = NULL;
    tally_stream_options so = {.fill_events = o->stream_page};
    r->error = tally_stream_open(c, o->publish_url, r->first, &so, &s);
    int64_t start = clock_mono_ns();
    uint64_t expect = r->first, total = until >= r->first ? until - r->first + 1 : 0;
    progress line; /* events read of those asked for, every 1024 events: a clock read */
    progress_init(&line, "tally-bench", o->progress, PROGRESS_ITEMS);
    while (r->error == TALLY_ok && expect <= until) {
        tally_event ev;
        int rc = tally_stream_next(s, &ev, 1000);
        if (rc == TALLY_timed_out)
            continue;
        if (rc != TALLY_ok) {
            r->error = rc;
            break;
        }
        r->out_of_order += ev.seq != expect;
        r->last = ev.seq;
        r->events++;
        expect = ev.seq + 1;
        tally_events_release(&ev, 1); /* the handler that does nothing */
        if ((r->events & 1023) == 0)
            progress_update(&line, "events", r->events, total);
    }
    r->elapsed_ns = clock_mono_ns() - start;
    progress_end(&line);
    tally_stream_close(s);
}

static void print_stream(const bench *b, const stream_result *r, bool verified)
{
    double seconds = (double)r->elapsed_ns / 1e9;
    double rate = seconds > 0 ? (double)r->events / seconds : 0;
    if (!b->opt.json) {
        printf("tally-bench --stream: %s, seqs %" PRIu64 "..%" PRIu64 "\n",
               effective_url(&b->opt), r->first, r->last);
        printf("  read %" PRIu64 " events in %.3f s: %.0f events/s\n", r->events, seconds, rate);
        printf("  client CPU %.3f s (%.2f us/event)", r->client_cpu_s,
               r->events ? r->client_cpu_s * 1e6 / (double)r->events : 0);
        if (r->server_cpu_s >= 0)
            printf(", server CPU %.3f s (%.2f us/event)", r->server_cpu_s,
                   r->events ? r->server_cpu_s * 1e6 / (double)r->events : 0);
        printf("\n");
        if (r->error)
            printf("  stopped: %s\n", tally_strerror(r->error));
        printf("verified: %s\n", verified ? "true" : "false");
        return;
    }
    json_t *j = json_object();
    json_object_set_new(j, "mode", json_string("stream"));
    json_object_set_new(j, "first_seq", json_integer((json_int_t)r->first));
    json_object_set_new(j, "last_seq", json_integer((json_int_t)r->last));
    json_object_set_new(j, "events", json_integer((json_int_t)r->events));
    json_object_set_new(j, "seconds", json_real(seconds));
    json_object_set_new(j, "events_per_sec", json_real(rate));
    json_object_set_new(j, "page_events", json_integer(b->opt.stream_page));
    json_object_set_new(j, "client_cpu_s", json_real(r->client_cpu_s));
    json_object_set_new(j, "server_cpu_s",
                        r->server_cpu_s >= 0 ? json_real(r->server_cpu_s) : json_null());
    json_object_set_new(j, "first_error",
                        r->error ? json_string(tally_strerror(r->error)) : json_null());
    json_object_set_new(j, "verified", json_boolean(verified));
    char *text = json_dumps(j, JSON_COMPACT);
    printf("%s\n", text ? text : "{}");
    free(text);
    json_decref(j);
}

int stream_run(bench *b)
{
    tally_client *c;
    int rc = client_open(&b->opt, b->opt.timeout_ms, &c);
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally-bench: cannot create a client: %s\n", tally_strerror(rc));
        return EXIT_FAILED;
    }
    tally_stats st;
    rc = read_with_retries(b, c, read_stats, 0, &st);
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally-bench: tallyd at %s does not answer: %s\n",
                effective_url(&b->opt), tally_strerror(rc));
        tally_client_close(c);
        return EXIT_UNREACHABLE;
    }
    stream_result r = {.first = b->opt.stream_from ? b->opt.stream_from : 1};
    if (r.first < st.first_seq)
        r.first = st.first_seq;
    uint64_t until = st.head_seq;
    if (b->opt.ops && r.first + b->opt.ops - 1 < until)
        until = r.first + b->opt.ops - 1;
    if (!b->opt.json)
        fprintf(stderr, "tally-bench --stream: seqs %" PRIu64 "..%" PRIu64 ", pages of %u...\n",
                r.first, until, b->opt.stream_page);
    r.server_cpu_s = process_cpu_s(b->opt.server_pid);
    r.client_cpu_s = self_cpu_s();
    stream_read(b, c, until, &r);
    r.client_cpu_s = self_cpu_s() - r.client_cpu_s;
    if (r.server_cpu_s >= 0)
        r.server_cpu_s = process_cpu_s(b->opt.server_pid) - r.server_cpu_s;
    bool verified = r.error == TALLY_ok && r.out_of_order == 0 &&
                    (until < r.first || (r.events == until - r.first + 1 && r.last == until));
    print_stream(b, &r, verified);
    tally_client_close(c);
    return verified ? EXIT_VERIFIED : EXIT_FAILED;
}

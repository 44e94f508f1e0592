/*
 * figures_history.c — the figures' ring (figures_history.h): samples in time order,
 * subscribers in fixed columns.
 */
#include "net/metrics/figures_history.h"

#include "common/error.h"
#include "common/limits.h"
#include "log/subscriber.h"
#include "net/ops/figures.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(TALLY_FIGURES_SUBSCRIBERS_MAX <= TALLY_SUBSCRIBERS_MAX,
               "the sampled subscribers are some of those that may exist");

/* One subscriber in one sample. */
typedef struct sub_point {
    bool present; /* sampled (a subscriber of this column existed) */
    uint32_t oldest_unacked_age_s;
    uint32_t dead_letters;
    uint64_t pending;
    uint64_t redelivered; /* in total, since the subscriber was created */
} sub_point;

typedef struct sample {
    int64_t t_ms;
    uint64_t head_seq, commits, commands;
    uint64_t map_used_bytes, map_size_bytes;
    bool disk_known;
    uint64_t disk_free_bytes;
    uint32_t subscribers; /* that existed, sampled or not */
    sub_point subs[TALLY_FIGURES_SUBSCRIBERS_MAX];
} sample;

struct net_history {
    pthread_mutex_t mu;
    sample *ring;          /* TALLY_FIGURES_SAMPLES_MAX of them */
    uint32_t first, count; /* the oldest sample's index; samples held */
    uint64_t map_max_bytes;
    sample scratch; /* the sample being taken (the sampling thread's) */
    /* The subscriber of each column, "" when none has had it. */
    char names[TALLY_FIGURES_SUBSCRIBERS_MAX][TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1];
};

net_history *net_history_create(void)
{
    net_history *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    h->ring = calloc(TALLY_FIGURES_SAMPLES_MAX, sizeof(sample));
    if (h->ring == NULL) {
        free(h);
        return NULL;
    }
    pthread_mutex_init(&h->mu, NULL);
    return h;
}

void net_history_destroy(net_history *h)
{
    if (h == NULL)
        return;
    pthread_mutex_destroy(&h->mu);
    free(h->ring);
    free(h);
}

static sample *at(net_history *h, uint32_t i)
{
    return &h->ring[(h->first + i) % TALLY_FIGURES_SAMPLES_MAX];
}

/* ---- sampling ---- */

typedef struct sub_collect {
    sample *s;
    sub_state states[TALLY_FIGURES_SUBSCRIBERS_MAX];
    uint32_t sampled;
} sub_collect;

static int collect_sub(const sub_state *st, void *ctx)
{
    sub_collect *c = ctx;
    if (c->sampled < TALLY_FIGURES_SUBSCRIBERS_MAX)
        c->states[c->sampled++] = *st;
    c->s->subscribers++;
    return 0;
}

static bool column_taken(const net_history *h, int col, const sub_collect *c)
{
    for (uint32_t j = 0; j < c->sampled; j++)
        if (strcmp(h->names[col], c->states[j].name) == 0)
            return true;
    return false;
}

/* The column of name: its own, else an empty one, else one no sampled
 * subscriber holds (emptied first: its history was another's). Under mu. */
static int column_of(net_history *h, const char *name, const sub_collect *c)
{
    int col = -1;
    for (int i = 0; i < TALLY_FIGURES_SUBSCRIBERS_MAX; i++) {
        if (strcmp(h->names[i], name) == 0)
            return i;
        if (col < 0 && h->names[i][0] == '\0')
            col = i;
    }
    for (int i = 0; i < TALLY_FIGURES_SUBSCRIBERS_MAX && col < 0; i++)
        if (!column_taken(h, i, c))
            col = i;
    assert(col >= 0); /* sampled <= columns */
    snprintf(h->names[col], sizeof(h->names[col]), "%s", name);
    for (uint32_t i = 0; i < h->count; i++)
        at(h, i)->subs[col].present = false;
    return col;
}

static int sample_subs(net_history *h, store_txn *t, int64_t now_ms, sample *s)
{
    sub_collect c = {.s = s};
    int rc = sub_list(t, collect_sub, &c);
    for (uint32_t i = 0; rc == TALLY_ok && i < c.sampled; i++) {
        net_sub_figures f;
        rc = net_sub_figures_get(t, &c.states[i], now_ms, &f);
        if (rc != TALLY_ok)
            break;
        pthread_mutex_lock(&h->mu);
        int col = column_of(h, c.states[i].name, &c);
        pthread_mutex_unlock(&h->mu);
        s->subs[col] = (sub_point){true,
                                   f.oldest_unacked_age_s > UINT32_MAX ? UINT32_MAX
                                                                       : (uint32_t)f.oldest_unacked_age_s,
                                   c.states[i].dead_letters > UINT32_MAX
                                       ? UINT32_MAX
                                       : (uint32_t)c.states[i].dead_letters,
                                   f.pending, c.states[i].redelivered};
    }
    return rc;
}

int net_history_sample(net_history *h, store_txn *t, int64_t now_ms,
                       const net_history_counters *c, const net_health_facts *facts)
{
    sample *s = &h->scratch; /* too big for a small stack */
    net_store_figures f;
    memset(s, 0, sizeof(*s));
    int rc = net_store_figures_get(t, &f);
    if (rc == TALLY_ok)
        rc = sample_subs(h, t, now_ms, s);
    if (rc != TALLY_ok)
        return rc;
    s->t_ms = now_ms;
    s->head_seq = f.head.seq;
    s->commits = c->commits;
    s->commands = c->commands;
    s->map_used_bytes = f.map_used_bytes;
    s->map_size_bytes = f.map_size_bytes;
    s->disk_known = facts->disk_known;
    s->disk_free_bytes = facts->disk_free_bytes;
    pthread_mutex_lock(&h->mu);
    h->map_max_bytes = f.map_max_bytes;
    if (h->count == TALLY_FIGURES_SAMPLES_MAX) {
        h->first = (h->first + 1) % TALLY_FIGURES_SAMPLES_MAX;
        h->count--;
    }
    *at(h, h->count++) = *s;
    pthread_mutex_unlock(&h->mu);
    return TALLY_ok;
}

/* ---- the JSON document ---- */

/* An integer by the JSON API's value rule: beyond 2^53 a decimal string
 * (docs/PROTOCOL.md, "The value rule"). */
static void u64_json(net_text *b, uint64_t v)
{
    if (v > (UINT64_C(1) << 53))
        net_text_printf(b, "\"%llu\"", (unsigned long long)v);
    else
        net_text_printf(b, "%llu", (unsigned long long)v);
}

typedef enum column {
    COL_T_MS,
    COL_HEAD_SEQ,
    COL_COMMITS_PER_S,
    COL_COMMANDS_PER_S,
    COL_MAP_USED,
    COL_MAP_SIZE,
    COL_DISK_FREE,
    COL_SUBSCRIBERS,
    COL_COUNT
} column;

static const char *const column_names[COL_COUNT] = {
    "t_ms", "head_seq", "commits_per_s", "commands_per_s", "map_used_bytes",
    "map_size_bytes", "disk_free_bytes", "subscribers_total",
};

/* A counter's rate between the samples before and s; negative: none. */
static double rate_per_s(const sample *before, const sample *s, uint64_t before_v, uint64_t v)
{
    if (before == NULL || s->t_ms <= before->t_ms || v < before_v)
        return -1;
    return (double)(v - before_v) * 1000.0 / (double)(s->t_ms - before->t_ms);
}

static void value_json(net_text *b, column c, const sample *before, const sample *s)
{
    double r;
    switch (c) {
    case COL_T_MS: net_text_printf(b, "%lld", (long long)s->t_ms); return;
    case COL_HEAD_SEQ: u64_json(b, s->head_seq); return;
    case COL_COMMITS_PER_S:
    case COL_COMMANDS_PER_S:
        r = c == COL_COMMITS_PER_S
                ? rate_per_s(before, s, before ? before->commits : 0, s->commits)
                : rate_per_s(before, s, before ? before->commands : 0, s->commands);
        if (r < 0)
            net_text_printf(b, "null");
        else
            net_text_printf(b, "%.2f", r);
        return;
    case COL_MAP_USED: u64_json(b, s->map_used_bytes); return;
    case COL_MAP_SIZE: u64_json(b, s->map_size_bytes); return;
    case COL_DISK_FREE:
        if (s->disk_known)
            u64_json(b, s->disk_free_bytes);
        else
            net_text_printf(b, "null");
        return;
    case COL_SUBSCRIBERS: net_text_printf(b, "%u", s->subscribers); return;
    case COL_COUNT: break;
    }
    assert(!"a column without a value");
}

typedef enum sub_column { SUB_PENDING, SUB_OLDEST, SUB_REDELIVERED, SUB_DEAD, SUB_COL_COUNT } sub_column;
static const char *const sub_column_names[SUB_COL_COUNT] = {
    "pending", "oldest_unacked_age_s", "redelivered_total", "dead_letters",
};

static void sub_value_json(net_text *b, sub_column c, const sub_point *p)
{
    if (!p->present) {
        net_text_printf(b, "null");
        return;
    }
    uint64_t v = c == SUB_PENDING       ? p->pending
                 : c == SUB_OLDEST      ? p->oldest_unacked_age_s
                 : c == SUB_REDELIVERED ? p->redelivered
                                        : p->dead_letters;
    u64_json(b, v);
}

/* The columns of subscribers present in samples [from, count). Under mu. */
static void subs_json(net_history *h, uint32_t from, net_text *b)
{
    net_text_printf(b, "\"subscribers\":[");
    bool first = true;
    for (int col = 0; col < TALLY_FIGURES_SUBSCRIBERS_MAX; col++) {
        bool any = false;
        for (uint32_t i = from; i < h->count && !any; i++)
            any = at(h, i)->subs[col].present;
        if (!any)
            continue;
        net_text_printf(b, "%s{\"name\":\"", first ? "" : ",");
        net_text_escaped(b, h->names[col]);
        net_text_printf(b, "\"");
        first = false;
        for (int c = 0; c < SUB_COL_COUNT; c++) {
            net_text_printf(b, ",\"%s\":[", sub_column_names[c]);
            for (uint32_t i = from; i < h->count; i++) {
                if (i > from)
                    net_text_printf(b, ",");
                sub_value_json(b, (sub_column)c, &at(h, i)->subs[col]);
            }
            net_text_printf(b, "]");
        }
        net_text_printf(b, "}");
    }
    net_text_printf(b, "]");
}

void net_history_json(net_history *h, int64_t since_ms, net_text *out)
{
    pthread_mutex_lock(&h->mu);
    uint32_t from = 0;
    while (from < h->count && at(h, from)->t_ms <= since_ms)
        from++;
    net_text_printf(out,
                    "{\"interval_ms\":%d,\"samples_max\":%d,\"subscribers_max\":%d,"
                    "\"map_max_bytes\":",
                    TALLY_FIGURES_INTERVAL_MS, TALLY_FIGURES_SAMPLES_MAX,
                    TALLY_FIGURES_SUBSCRIBERS_MAX);
    u64_json(out, h->map_max_bytes);
    net_text_printf(out, ",\"samples\":%u", h->count - from);
    for (int c = 0; c < COL_COUNT; c++) {
        net_text_printf(out, ",\"%s\":[", column_names[c]);
        for (uint32_t i = from; i < h->count; i++) {
            if (i > from)
                net_text_printf(out, ",");
            value_json(out, (column)c, i > 0 ? at(h, i - 1) : NULL, at(h, i));
        }
        net_text_printf(out, "]");
    }
    net_text_printf(out, ",");
    subs_json(h, from, out);
    net_text_printf(out, "}\n");
    pthread_mutex_unlock(&h->mu);
}

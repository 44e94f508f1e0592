/*
 * histogram.c — tally-bench's latency histogram: log-linear, values in ns,
 * 64 sub-buckets per power of two (under 1.6 % error), HDR-like.
 */
#include "config.h"

#include "tools/bench/bench.h"

static unsigned hist_index(uint64_t v)
{
    if (v < HIST_LINEAR)
        return (unsigned)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v);
    unsigned shift = msb - 6; /* v >> shift is in [64, 128) */
    return HIST_LINEAR + (shift - 1) * HIST_SUB + (unsigned)((v >> shift) - HIST_SUB);
}

/* Middle of bucket i. */
static uint64_t hist_value(unsigned i)
{
    if (i < HIST_LINEAR)
        return i;
    unsigned shift = (i - HIST_LINEAR) / HIST_SUB + 1;
    uint64_t m = (i - HIST_LINEAR) % HIST_SUB + HIST_SUB;
    return (m << shift) + ((UINT64_C(1) << shift) >> 1);
}

void hist_record(histogram *h, uint64_t ns)
{
    h->counts[hist_index(ns)]++;
    h->total++;
    h->sum_ns += ns;
    if (ns > h->max_ns)
        h->max_ns = ns;
}

void hist_merge(histogram *into, const histogram *from)
{
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        into->counts[i] += from->counts[i];
    into->total += from->total;
    into->sum_ns += from->sum_ns;
    if (from->max_ns > into->max_ns)
        into->max_ns = from->max_ns;
}

/* The q-quantile (0 < q <= 1) in ms; 0 when empty. */
double hist_quantile_ms(const histogram *h, double q)
{
    if (h->total == 0)
        return 0;
    double exact = q * (double)h->total;
    uint64_t rank = (uint64_t)exact, seen = 0; /* ceil without libm */
    if ((double)rank < exact)
        rank++;
    if (rank < 1)
        rank = 1;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank) {
            uint64_t v = hist_value(i);
            return (double)(v < h->max_ns ? v : h->max_ns) / 1e6;
        }
    }
    return (double)h->max_ns / 1e6;
}

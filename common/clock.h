/*
 * clock.h — the two clocks tally reads: wall time (Unix milliseconds, for
 * times that are stored or compared with stored ones) and monotonic time
 * (milliseconds, for deadlines and waits); both also in nanoseconds.
 */
#ifndef TALLY_CLOCK_H
#define TALLY_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t clock_ms_of(clockid_t which)
{
    struct timespec ts;
    clock_gettime(which, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds since the Unix epoch, UTC. */
static inline int64_t clock_wall_ms(void) { return clock_ms_of(CLOCK_REALTIME); }

/* Milliseconds of a clock that never steps back. */
static inline int64_t clock_mono_ms(void) { return clock_ms_of(CLOCK_MONOTONIC); }

/* Nanoseconds, for what milliseconds are too coarse for: request latencies
 * (tally-bench's histogram) and seeds. Fits int64_t until the year 2262. */
static inline int64_t clock_ns_of(clockid_t which)
{
    struct timespec ts;
    clock_gettime(which, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Nanoseconds since the Unix epoch, UTC. */
static inline int64_t clock_wall_ns(void) { return clock_ns_of(CLOCK_REALTIME); }

/* Nanoseconds of a clock that never steps back. */
static inline int64_t clock_mono_ns(void) { return clock_ns_of(CLOCK_MONOTONIC); }

/* The CLOCK_REALTIME time ms from now, as pthread_cond_timedwait takes
 * its deadline. */
static inline struct timespec clock_realtime_in_ms(int64_t ms)
{
    struct timespec at;
    clock_gettime(CLOCK_REALTIME, &at);
    at.tv_sec += ms / 1000;
    at.tv_nsec += (ms % 1000) * 1000000;
    if (at.tv_nsec >= 1000000000) {
        at.tv_sec++;
        at.tv_nsec -= 1000000000;
    }
    return at;
}

#endif

/*
 * echo.c — tally-bench --echo: the NNG request/reply ceiling measured with
 * tally's own client machinery. Against tally-echo (tools/tally_echo.c),
 * each operation is one request of --echo-bytes sent with
 * tally_request_raw: the tally_client's socket, a context per call, its
 * timeouts, and libtally's decoding of the reply, so the client side costs
 * what a tally request's transport costs. Nothing is set up or read back
 * on a server; the run is verified when every echo came back byte for
 * byte. The threads, the bench's retries, the histograms and the report
 * are the ordinary ones.
 *
 * The request is a msgpack map, shaped like a request, so that libtally
 * decodes the echo as it decodes a reply:
 *   {"op": "echo", "seq": <uint64, unique per operation>, "pad": <bin32>}
 * with the pad sized to make the whole --echo-bytes long.
 */
#include "config.h"

#include "common/bytes.h"
#include "tools/bench/bench.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fixed head of every echo request; the seq and pad length follow. */
static const uint8_t echo_head[] = {
    0x83,                               /* map of 3 */
    0xa2, 'o', 'p', 0xa4, 'e', 'c', 'h', 'o',
    0xa3, 's', 'e', 'q', 0xcf,          /* uint64, 8 bytes follow */
};
#define ECHO_SEQ_OFFSET sizeof(echo_head)
static const uint8_t echo_pad_key[] = {0xa3, 'p', 'a', 'd', 0xc6}; /* bin32, 4-byte length */
#define ECHO_PAD_KEY_OFFSET (ECHO_SEQ_OFFSET + 8)
#define ECHO_PAD_OFFSET (ECHO_PAD_KEY_OFFSET + sizeof(echo_pad_key) + 4)

_Static_assert(ECHO_PAD_OFFSET == BENCH_ECHO_HEADER_BYTES, "the header size bench.h names");
_Static_assert(BENCH_ECHO_BYTES_MAX - BENCH_ECHO_HEADER_BYTES <= UINT32_MAX, "pad length fits bin32");

/* Fill request (len bytes) for sender index; the pad is a pattern that
 * differs per sender, so a reply crossed between senders is seen too. */
static void echo_request_fill(uint8_t *request, size_t len, unsigned index, uint64_t seq)
{
    assert(len >= BENCH_ECHO_HEADER_BYTES);
    memcpy(request, echo_head, sizeof(echo_head));
    put_u64_be(request + ECHO_SEQ_OFFSET, seq);
    memcpy(request + ECHO_PAD_KEY_OFFSET, echo_pad_key, sizeof(echo_pad_key));
    put_u32_be(request + ECHO_PAD_KEY_OFFSET + sizeof(echo_pad_key),
               (uint32_t)(len - BENCH_ECHO_HEADER_BYTES));
    for (size_t i = ECHO_PAD_OFFSET; i < len; i++)
        request[i] = (uint8_t)(i * 31u + index * 7u + (i >> 8));
}

/* Send request until an answer that is not a fault, at most attempts
 * times; st (NULL: not counted) gets every attempt's latency. Returns
 * TALLY_ok with *same telling whether the answer was the request, byte for
 * byte, or the last attempt's code. */
static int echo_exchange(const bench *b, tally_client *c, thread_stats *st, const uint8_t *request,
                         unsigned attempts, bool *same)
{
    size_t len = b->opt.echo_bytes;
    int rc = TALLY_internal;
    *same = false;
    for (unsigned attempt = 1; attempt <= attempts; attempt++) {
        if (attempt > 1) {
            if (st)
                st->retries++;
            backoff(attempt - 1);
        }
        void *reply = NULL;
        size_t reply_len = 0;
        int64_t t0 = clock_mono_ns();
        rc = tally_request_raw(c, request, len, &reply, &reply_len);
        if (st) {
            hist_record(&st->hist, (uint64_t)(clock_mono_ns() - t0));
            st->requests++;
        }
        if (rc == TALLY_ok) {
            *same = reply_len == len && memcmp(reply, request, len) == 0;
            free(reply);
        }
        if (!is_fault(rc))
            break;
    }
    return rc;
}

int echo_probe(bench *b)
{
    uint8_t *request = malloc(b->opt.echo_bytes);
    tally_client *c = NULL;
    int rc = request ? client_open(&b->opt, b->opt.timeout_ms < 3000 ? b->opt.timeout_ms : 3000, &c)
                     : TALLY_out_of_memory;
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally-bench: cannot create a client for %s: %s\n", effective_url(&b->opt),
                tally_strerror(rc));
        free(request);
        return rc == TALLY_invalid_argument ? EXIT_USAGE : EXIT_FAILED;
    }
    echo_request_fill(request, b->opt.echo_bytes, 0, 0);
    bool same;
    rc = echo_exchange(b, c, NULL, request, 3, &same);
    tally_client_close(c);
    free(request);
    if (rc == TALLY_ok && same)
        return -1;
    if (rc == TALLY_ok) {
        fprintf(stderr, "tally-bench: the server at %s answers but does not echo (--echo needs "
                        "tally-echo, not tallyd)\n", effective_url(&b->opt));
        return EXIT_FAILED;
    }
    fprintf(stderr, "tally-bench: no echo server answers at %s: %s\n", effective_url(&b->opt),
            tally_strerror(rc));
    return rc == TALLY_unreachable || rc == TALLY_timed_out ? EXIT_UNREACHABLE : EXIT_FAILED;
}

int echo_prepare(bench *b)
{
    int rc = make_clients(b);
    if (rc != TALLY_ok) {
        note_error(b, "cannot create clients: %s", tally_strerror(rc));
        return rc;
    }
    rc = make_threads(b);
    for (unsigned i = 0; rc == TALLY_ok && i < b->opt.clients; i++) {
        worker *w = &b->workers[i];
        w->echo_request = malloc(b->opt.echo_bytes);
        if (w->echo_request == NULL) {
            rc = TALLY_out_of_memory;
            break;
        }
        echo_request_fill(w->echo_request, b->opt.echo_bytes, i + 1, (uint64_t)(i + 1) << 40);
    }
    for (unsigned i = 0; rc == TALLY_ok && i < b->client_count; i++) { /* connect them all */
        bool same;
        rc = echo_exchange(b, b->clients[i], NULL, b->workers[0].echo_request, b->opt.attempts_max,
                           &same);
        if (rc == TALLY_ok && !same)
            rc = TALLY_internal;
    }
    if (rc != TALLY_ok)
        note_error(b, "setup failed: %s", tally_strerror(rc));
    return rc;
}

void echo_send(worker *w)
{
    bench *b = w->b;
    uint64_t seq = ((uint64_t)(w->index + 1) << 40) | ++w->echo_seq;
    put_u64_be(w->echo_request + ECHO_SEQ_OFFSET, seq);
    bool same;
    int rc = echo_exchange(b, w->client, &w->st, w->echo_request, b->opt.attempts_max, &same);
    if (rc == TALLY_ok && same) {
        atomic_fetch_add(&b->n.effects, 1);
    } else if (rc == TALLY_ok) {
        atomic_fetch_add(&b->n.echo_mismatches, 1);
        note_error(b, "echo seq %" PRIu64 " came back different", seq);
    } else {
        atomic_fetch_add(&b->n.unresolved, 1);
        atomic_store(&b->abort, true);
        note_error(b, "echo seq %" PRIu64 ": no answer after %u attempts: %s", seq,
                   b->opt.attempts_max, tally_strerror(rc));
    }
}

void echo_verify(bench *b, report *r)
{
    uint64_t same = LOAD(effects), differed = LOAD(echo_mismatches), unanswered = LOAD(unresolved);
    r->verified = true;
    check_add(r, "answered", unanswered == 0 && same + differed > 0, true,
              "%" PRIu64 " echoes answered, %" PRIu64 " without an answer after %u attempts",
              same + differed, unanswered, b->opt.attempts_max);
    check_add(r, "identical", differed == 0 && same > 0, true,
              "%" PRIu64 " of %" PRIu64 " echoes came back byte for byte (%" PRIu32
              "-byte requests)",
              same, same + differed, b->opt.echo_bytes);
}

/*
 * stream.h — cluster mode's command stream (docs/CLUSTER.md): a
 * connection to a NATS JetStream cluster, the stream created or checked
 * exactly as docs/CLUSTER.md's stream table says, one message appended on
 * NAME.<kind> with a Nats-Msg-Id and its stream sequence returned, the
 * stream read in order from a given sequence, and the stream's bounds.
 *
 * This room knows nothing of the ledger: a message is bytes. It includes
 * only common/ and the NATS C client (cnats); tallyd's single-node build
 * does not link it.
 *
 * Reading (net/cluster/quorum.c): push consumers. A cluster node reads
 * the whole stream from its position onwards, in order, as it grows; a
 * push consumer with flow control and idle heartbeats is streamed to the
 * reader by the server without a round trip per message, while a pull of
 * gets costs a request and a reply per message and must poll for the
 * next one. A consumer of nats-server 2.9 or 2.10 is an ephemeral
 * one-replica consumer hosted by one server, which it delivers from: that server's
 * own store, which may hold what the stream does not (nats-server
 * 2.9.10, deposed as the leader while stopped, stored the publishes it
 * held on waking, without its quorum). So the reader keeps as many
 * consumers as make a majority of the stream's replicas (2 of 3), each on
 * another server (a consumer's info names its server; one placed on a
 * server another already reads is made again), reads them side by side,
 * and returns a position only when every copy holds the same bytes there:
 * a majority of the replicas holds them. Copies that differ make every
 * consumer again (JetStream places them anew) until a majority agrees.
 * It also checks every message's stream sequence itself (the next one
 * must be the one after the last returned; one below is a copy and
 * skipped) and makes a consumer again from that sequence when it sees a
 * gap, a consumer error, or a second without a message (counted over
 * calls) while the stream holds more. So the reader's order is the
 * stream's, each message exactly once, as a majority holds it. (JetStream's
 * Direct Get would not do: in 2.9.10 any replica subscribed to it may
 * answer a request, whichever server the request entered, and the answer
 * does not say which: docs/CLUSTER.md, "Applying".)
 *
 * Errors (common/tally_error.h): TALLY_invalid_argument (a bad config, or
 * a stream whose settings break the guarantees: why names the setting),
 * TALLY_unreachable (no server answered, or JetStream has no leader),
 * TALLY_timed_out (no PubAck, or no message, within the wait),
 * TALLY_not_found (a read from a sequence the stream no longer holds),
 * TALLY_out_of_memory, TALLY_internal (an answer this code does not
 * understand). why, where given, is a NUL-terminated sentence.
 */
#ifndef TALLY_NET_CLUSTER_STREAM_H
#define TALLY_NET_CLUSTER_STREAM_H

#include "common/limits.h"
#include "common/sha256.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLUSTER_STREAM_NAME_DEFAULT "TALLY_COMMANDS"
#define CLUSTER_WHY_BYTES 256

typedef struct cluster_stream cluster_stream;
typedef struct cluster_reader cluster_reader;

typedef struct cluster_stream_config {
    const char *const *urls; /* nats://host:port, at least one */
    size_t url_count;        /* 1..TALLY_CLUSTER_URLS_MAX */
    const char *name;        /* NULL: CLUSTER_STREAM_NAME_DEFAULT; A-Z a-z 0-9 _ - */
    /* When the stream is created: these. When it exists: at least these
     * (0: the defaults of common/limits.h). */
    uint32_t replicas;
    int64_t duplicate_window_ms;
    int32_t max_msg_bytes;
    /* When created only (0: TALLY_CLUSTER_MAX_AGE_MS_DEFAULT; -1 none). */
    int64_t max_age_ms;
    /* A PubAck's and a JetStream API call's wait (0: the default). */
    int64_t request_ms;
    /* How the connection proves itself (NULL: not given; read at open,
     * not kept): a NATS credentials file (JWT and nkey seed), a user and
     * its password, TLS with a CA to verify the servers (a tls:// URL or
     * any URL once tls_ca_file is given) and a client certificate and key
     * for servers that ask for one. */
    const char *creds_file;
    const char *user, *password;
    const char *tls_ca_file, *tls_cert_file, *tls_key_file;
} cluster_stream_config;

/* Connect to cfg->urls (any that answers; the client moves among them on
 * its own) and create the stream, or check the one there. *out is the
 * caller's to close; NULL on an error. A server without a JetStream
 * leader yet answers TALLY_unreachable: try again. */
int cluster_stream_open(cluster_stream **out, const cluster_stream_config *cfg, char *why,
                        size_t why_size);
void cluster_stream_close(cluster_stream *s);
/* The connection closed, from any thread: every wait on NATS (a publish's
 * PubAck, a request, a reader's next message) ends now with an error, and
 * every later call fails at once; for a stop. cluster_stream_close still
 * frees s. */
void cluster_stream_interrupt(cluster_stream *s);

/* The stream's name (valid until close). */
const char *cluster_stream_name(const cluster_stream *s);

/* Append data on NAME.kind with header Nats-Msg-Id msg_id, waiting for
 * the PubAck: *seq is the message's stream sequence (the stored one's
 * when JetStream had it already: *duplicate true). kind: 1..16 bytes of
 * a-z; msg_id: 1..TALLY_CLUSTER_MSG_ID_BYTES_MAX bytes. On
 * TALLY_timed_out or TALLY_unreachable it is unknown whether the message
 * was stored: publish it again with the same msg_id. */
int cluster_stream_publish(cluster_stream *s, const char *kind, const char *msg_id,
                           const void *data, size_t len, uint64_t *seq, bool *duplicate,
                           char *why, size_t why_size);

/* The stream's first and last sequence (0 and 0 when empty; first is
 * last + 1 once every message aged out), from its leader; while the
 * stream has no leader TALLY_unreachable (a replica's own answer then may
 * lag the stream). The answer also says the stream's replicas, which an
 * operator may have changed since: every reader reads each position from
 * a majority of them from then on (cluster_stream_replicas). */
int cluster_stream_bounds(cluster_stream *s, uint64_t *first, uint64_t *last);
/* The stream's replicas as last known (created, found, or changed since:
 * cluster_stream_bounds), and in *required (unless NULL) the least the
 * node was configured to require (--cluster-replicas). */
int64_t cluster_stream_replicas(const cluster_stream *s, uint32_t *required);

/* The message a majority of the stream's replicas hold at seq, read as
 * the reader reads (a reader from seq, for up to the request wait): its
 * Nats-Msg-Id into msg_id ("" when it has none, truncated to id_size)
 * and the SHA-256 of its bytes into hash. TALLY_ok, TALLY_not_found when
 * the stream's first message is past seq, TALLY_timed_out when no
 * majority held one message there in time (none, or not the same), or an
 * error of the list above. */
int cluster_stream_get(cluster_stream *s, uint64_t seq, char *msg_id, size_t id_size,
                       uint8_t hash[SHA256_BYTES]);

/* A message read: its stream sequence, subject and bytes, valid until
 * the reader's next call or close. */
typedef struct cluster_message {
    uint64_t seq;
    const char *subject;
    const void *data;
    size_t len;
    const char *msg_id; /* its Nats-Msg-Id; "" when it has none */
    bool corrected; /* the replicas read held different messages here: this is the majority's */
} cluster_message;

/* A reader of s from sequence from (>= 1); s must outlive it. */
int cluster_reader_open(cluster_reader **out, cluster_stream *s, uint64_t from);
void cluster_reader_close(cluster_reader *r);

/* The next message in stream order, waiting up to wait_ms for it:
 * TALLY_ok with *m, TALLY_timed_out when none came, TALLY_not_found when
 * the stream's first message is past the one wanted (aged out: docs/CLUSTER.md,
 * "A node too far behind"). */
int cluster_reader_next(cluster_reader *r, int64_t wait_ms, cluster_message *m);

/* Like cluster_reader_next for the first message, then every next one
 * already received (none waited for), in order, up to max messages
 * (1..TALLY_CLUSTER_APPLY_MESSAGES_MAX) and while their bytes are under
 * bytes_max (the last taken may pass it): m[0..*count-1], valid until
 * the reader's next call or close. TALLY_ok with *count >= 1, or as
 * cluster_reader_next (*count 0). */
int cluster_reader_next_batch(cluster_reader *r, int64_t wait_ms, size_t max, size_t bytes_max,
                              cluster_message *m, size_t *count);

/* How many copies r reads each position from: a majority of the
 * stream's replicas as last known. */
size_t cluster_reader_copies(const cluster_reader *r);

/* How many consumers r made (at the start, and again on a gap, an error,
 * a silence while the stream held more, or copies that differed): for
 * tests and, later, a metric. */
uint64_t cluster_reader_resets(const cluster_reader *r);

/* How many positions the replicas read held different messages at (what
 * a majority holds was returned, once one agreed). */
uint64_t cluster_reader_corrected(const cluster_reader *r);

/* When the copies of a position differed since the last call (read
 * again until a majority agrees): true, and which server held what there
 * (up to CLUSTER_DIFFERED_BYTES) in what. */
#define CLUSTER_DIFFERED_BYTES 512
bool cluster_reader_differed(cluster_reader *r, char *what, size_t what_size);

/* How many of r's consumers could not be made since the last call (each
 * is tried again on the next read), and why the last one could not (up
 * to CLUSTER_DIFFERED_BYTES) in what when any: a permission or an
 * account's limit refused, or JetStream did not answer. */
uint64_t cluster_reader_place_failed(cluster_reader *r, char *what, size_t what_size);

/* Tests only: one server's copy of seq (the first server to deliver it
 * to r) is replaced, every time r reads it there, by data on NAME.kind
 * (at most 64 bytes, copied), a message the stream does not hold there,
 * as a deposed leader's stale store holds and delivers it. */
void cluster_reader_test_stale_copy_at(cluster_reader *r, uint64_t seq, const char *kind,
                                       const void *data, size_t len);

#endif

/*
 * metrics.h — tallyd's counters and histograms, and the Prometheus text
 * exposition of them with the store's figures (GET /metrics; the families
 * are listed in docs/OPERATIONS.md, "Metrics").
 *
 * The counters are one registry per process (tallyd runs one server), like
 * a Prometheus client library's default registry: hot paths add to them
 * with relaxed atomics and take no lock; a scrape reads each atomically
 * and the store's figures in its own read-only transaction, so it never
 * holds up the writer or a commit. Histograms have fixed buckets
 * (net_metrics_write says which); a sum is kept in integer units (ns or
 * commands) and printed in the family's unit.
 */
#ifndef TALLY_NET_METRICS_H
#define TALLY_NET_METRICS_H

#include "log/store.h"
#include "net/ops/protocol.h"
#include "common/text.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Error codes 0 .. NET_METRICS_CODES_MAX - 1 get their own series; any
 * other counts as "unknown_error". */
#define NET_METRICS_CODES_MAX 256

typedef enum net_request_kind { NET_REQUEST_READ, NET_REQUEST_WRITE } net_request_kind;

/* A request decoded and accepted for op (tally_requests_total{op}). */
void net_metrics_request(net_op_id op);
/* A request refused before it had an op (undecodable, too large). */
void net_metrics_request_invalid(void);
/* A request answered, elapsed_ns after it arrived (long-polls are not
 * observed: their wait is the client's choice). */
void net_metrics_request_done(net_request_kind kind, int64_t elapsed_ns);
/* A write's or subscriber write's outcomes, once its group was committed
 * (fault: the commit's fault, which every command of it gets). */
void net_metrics_written(const net_request *req, const net_result *res, int fault);
/* A write refused for code: TALLY_overloaded, TALLY_shutting_down or
 * TALLY_storage_full (tally_writes_refused_total{reason}); other codes
 * are not counted here. A storage_full also marks the time, for the
 * storage_full readiness check (net_metrics_storage_full_age_ms). */
void net_metrics_refused(int code);
/* The refusals among a write's outcomes (what net_metrics_written counts
 * of them), for writes that are not otherwise counted (webhooks). */
void net_metrics_written_refusals(const net_request *req, const net_result *res, int fault);
/* ms since a write was last answered storage_full, at wall time now_ms;
 * -1 when none was since tallyd started. */
int64_t net_metrics_storage_full_age_ms(int64_t now_ms);
/* events committed but not handed to the PUB socket: too large, beyond a
 * commit's publish limit, not copied (out of memory) or refused by the
 * socket (tally_publish_dropped_total). */
void net_metrics_publish_dropped(uint64_t events);
/* A group committed: its commands and how long the durable commit took. */
void net_metrics_commit(uint32_t commands, int64_t commit_ns);
/* Cluster mode (docs/CLUSTER.md, "Operations"): the phases of a group
 * of writes this node took. queued_ns: from its oldest request's arrival
 * to its publish (waiting for the groups before it); publish_ns: its
 * publish to JetStream's ack (retries through an election included);
 * applied_ns: that ack to this node's commit of the message. Only groups
 * that JetStream acknowledged are observed (applied_ns < 0: not applied
 * here within the wait, not observed in that histogram). */
void net_metrics_cluster_group(int64_t queued_ns, int64_t publish_ns, int64_t applied_ns);
/* The listener watchdog listened again (net/sp/listeners.c). */
void net_metrics_listener_restart(void);
/* The listener watchdog probed a listener (net/sp/listeners.c). */
void net_metrics_listener_probe(void);
/* A request refused by --auth: code TALLY_unauthenticated or TALLY_forbidden
 * (tally_auth_refused_total{reason}). */
void net_metrics_auth_refused(int code);

/* A request connection not taken (tally_connections_refused_total{reason}). */
typedef enum net_refusal {
    NET_REFUSED_TOTAL,       /* --max-connections */
    NET_REFUSED_PER_ADDRESS, /* --max-connections-per-address */
    NET_REFUSED_RESERVED,    /* the reserved share, asked by an address holding many */
    NET_REFUSAL_COUNT,
} net_refusal;
void net_metrics_connection_refused(net_refusal reason);
/* A request connection closed by tallyd (tally_connections_closed_total{reason}). */
typedef enum net_closure {
    NET_CLOSED_REQUEST_TIMEOUT, /* a request or the SP header not whole in time */
    NET_CLOSED_IDLE,            /* nothing in flight for --idle-timeout-s */
    NET_CLOSED_UNREAD_REPLIES,  /* its client read none of its replies for --idle-timeout-s */
    NET_CLOSURE_COUNT,
} net_closure;
void net_metrics_connection_closed(net_closure reason);
/* A long-poll beyond --max-long-polls-per-connection, answered at once
 * (tally_long_polls_refused_total). */
void net_metrics_long_poll_refused(void);

/* What the server knows that the store does not, for a scrape. */
typedef struct net_metrics_view {
    uint64_t connections;         /* request connections open now */
    uint64_t connections_refused; /* by any limit, since start (the exposition prints
                                     each reason from net_metrics_connection_refused) */
    uint64_t publish_subscribers; /* PUB connections now */
    uint64_t http_connections;    /* HTTP connections open now */
    uint64_t http_waiting;        /* HTTP requests waiting for their answer */
    uint64_t http_in_flight;      /* HTTP requests begun, reply not sent */
    uint64_t long_polls_parked;   /* log_reads and sub_fetches parked by the waiter now */
    uint64_t write_queue_depth;   /* writes waiting for the writer now */
    uint64_t writer_stall_ms;     /* the writer's time without progress while writes wait */
    bool disk_known;              /* statvfs of the data directory answered */
    uint64_t disk_free_bytes;
    bool ready;                   /* the health checks' readiness, evaluated for the scrape */
    unsigned readiness_failing, alerts_failing; /* failing checks per class */
    const char *version;
    /* Cluster mode (docs/CLUSTER.md, "Operations"); all 0 in single-node
     * mode, whose exposition has none of these families. */
    bool cluster;
    uint64_t cluster_position;        /* the stream position this node has applied */
    uint64_t cluster_stream_last_seq; /* the stream's last message, as last seen */
    uint64_t cluster_checkpoint_seq;  /* the last checkpoint compared; 0: none yet */
    unsigned cluster_checkpoint_agreeing; /* nodes whose digest there is this node's */
    bool cluster_diverged;            /* the node stopped serving */
} net_metrics_view;

/* The exposition (text format 0.0.4) of every family into out, with the
 * store's figures from the read-only transaction t at now_ms. Returns
 * TALLY_ok, or the store's fault (out is then unusable). */
int net_metrics_write(net_text *out, store_txn *t, const net_metrics_view *view, int64_t now_ms);

#endif

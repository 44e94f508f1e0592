/*
 * limits.h — every size, count, amount and time bound of tally, in one place.
 *
 * Names end with their unit (_bytes, _max, _ms, _s). Anything that comes
 * from outside (a request, a stored record, a command-line value) is checked
 * against these before it is used; exceeding one is a clear error, never
 * truncation, wrap-around or a crash. The relations between limits are
 * pinned with _Static_assert so that changing one cannot silently break
 * another.
 */
#ifndef TALLY_LIMITS_H
#define TALLY_LIMITS_H

#include <stdint.h>

/* Idempotency: the (consumer, key) pair names one logical operation. */
#define TALLY_CONSUMER_BYTES_MAX 64
#define TALLY_KEY_BYTES_MAX 128

/* Entitlements are keyed by (subject, feature). */
#define TALLY_SUBJECT_BYTES_MAX 128
#define TALLY_FEATURE_BYTES_MAX 64

/* Optional correlation id carried into events (not part of the fingerprint). */
#define TALLY_CORRELATION_BYTES_MAX 64

/* Atomic chains: members applied all-or-nothing. */
#define TALLY_CHAIN_COMMANDS_MAX 32

/* Amounts and balances are signed 64-bit; no value may exceed this. */
#define TALLY_AMOUNT_MAX INT64_MAX

/* Times are milliseconds since the Unix epoch, UTC. 9999-12-31T23:59:59.999Z. */
#define TALLY_TIME_MS_MAX INT64_C(253402300799999)
/* Hold timeouts: up to ten years. */
#define TALLY_HOLD_TIMEOUT_S_MAX UINT32_C(315360000)
/* Grant durations ("for 30 days"): up to a hundred years. */
#define TALLY_GRANT_DURATION_MS_MAX INT64_C(3153600000000)

/* One encoded event. Every op's own field limits keep its events under
 * TALLY_EVENT_SMALL_BYTES_MAX (a header and a body of up to three full
 * objects); only a webhook.received event carries a delivery's raw body,
 * so the cap is that body's limit plus room for the event's other fields.
 * Buffers that hold any event are on the heap (log/log.c encodes on the
 * stack first, up to the small size). */
#define TALLY_EVENT_SMALL_BYTES_MAX 4096
#define TALLY_EVENT_BYTES_MAX (TALLY_WEBHOOK_BODY_BYTES_MAX + 4096)
/* Events one command may append: a chain of members, one event each, plus
 * the expiry events of entities the members touch (at most two each). */
#define TALLY_COMMAND_EVENTS_MAX (TALLY_CHAIN_COMMANDS_MAX * 3)

/* Nesting depth accepted by the msgpack structure check. */
#define TALLY_MSGPACK_DEPTH_MAX 16

/* Store. */
#define TALLY_MAP_SIZE_BYTES_DEFAULT (UINT64_C(1) << 30)       /* 1 GiB */
#define TALLY_MAP_SIZE_BYTES_MIN (UINT64_C(1) << 20)           /* 1 MiB */
#define TALLY_MAP_SIZE_BYTES_MAX (UINT64_C(1) << 44)           /* 16 TiB */
/* tallyd grows a full map up to --map-max-mb; by default up to this or the
 * size of the data directory's filesystem, whichever is smaller. */
#define TALLY_MAP_MAX_BYTES_DEFAULT (UINT64_C(1) << 40)        /* 1 TiB */
#define TALLY_STORE_READERS_MAX 512
/* tallyd's check at open follows the hash chain of this many of the last
 * events (ledger/open_check.h; docs/OPERATIONS.md has what it costs). */
#define TALLY_OPEN_CHECK_EVENTS 1000
#define TALLY_PATH_BYTES_MAX 4000
/* A TLS certificate, key or CA file (PEM; a CA bundle of a few hundred
 * certificates fits). */
#define TALLY_TLS_FILE_BYTES_MAX (1024 * 1024)

/* Sweeps: items expired per call, so a sweep never holds the writer long. */
#define TALLY_SWEEP_ITEMS_MAX 1024

/* Retention (ledger/retention.c): records of each kind removed per sweep. */
#define TALLY_RETENTION_BATCH_MAX 256

/* Reads. */
#define TALLY_LOG_READ_EVENTS_MAX 1000
#define TALLY_LOG_READ_EVENTS_DEFAULT 100
/* A log_read (and sub_fetch) page holds at most this many bytes of events
 * as well as at most `limit` events, but always at least one event: with
 * large webhook events a page has fewer events than asked, and the reader
 * goes on from the last seq + 1 (docs/PROTOCOL.md, "Pages"). */
#define TALLY_LOG_READ_BYTES_MAX (2 * 1024 * 1024)
#define TALLY_LOG_WAIT_MS_MAX 30000
#define TALLY_HISTORY_ENTRIES_MAX 1000
#define TALLY_HISTORY_ENTRIES_DEFAULT 100
#define TALLY_ACCOUNT_LIST_ENTRIES_MAX 1000   /* accounts of one account_list page */
#define TALLY_ACCOUNT_LIST_ENTRIES_DEFAULT 100
/* account_query, transfer_query, account_transfers (ledger/query.h): records
 * of one page, and the index entries one page may examine (those that do
 * not match the filters the index does not cover count too): a page ends
 * there, with a cursor, so a query's cost is bounded whatever it filters. */
#define TALLY_QUERY_ENTRIES_MAX 1000
#define TALLY_QUERY_ENTRIES_DEFAULT 100
#define TALLY_QUERY_SCAN_ENTRIES_MAX 10000

/* Wire (net/). */
#define TALLY_PROTOCOL_VERSION 1
#define TALLY_REQUEST_BYTES_MAX (512 * 1024)
#define TALLY_REPLY_BYTES_MAX (4 * 1024 * 1024)
#define TALLY_BATCH_OPS_MAX 1000
#define TALLY_FIELD_NAME_BYTES_MAX 32

/* Server (net/). */
#define TALLY_CONTEXTS_DEFAULT 256
#define TALLY_CONTEXTS_MAX 4096
#define TALLY_QUEUE_REQUESTS_MAX 4096     /* writes waiting for the writer */
#define TALLY_CONNECTIONS_DEFAULT 1024    /* request connections at once */
#define TALLY_CONNECTIONS_MAX 65536
/* Request connections (net/sp/, docs/OPERATIONS.md "Overload and limits"):
 * one address holds at most so many; the last share of --max-connections
 * goes only to addresses holding fewer than TALLY_CONNECTIONS_FEW_PER_ADDRESS,
 * so that no one address (nor a few) can take every place. */
#define TALLY_CONNECTIONS_PER_ADDRESS_DEFAULT 64
#define TALLY_CONNECTIONS_RESERVED_PCT_DEFAULT 10
#define TALLY_CONNECTIONS_FEW_PER_ADDRESS 4
_Static_assert(TALLY_CONNECTIONS_FEW_PER_ADDRESS <= TALLY_CONNECTIONS_PER_ADDRESS_DEFAULT,
               "an address with few connections is below the per-address limit");
/* A request must arrive whole within --request-timeout-s of its first
 * byte (the SP header exchange too), plus its size at
 * --request-min-kib-per-s; a connection with nothing in flight is closed
 * after --idle-timeout-s, and so is one whose client leaves its replies
 * unread that long. */
#define TALLY_REQUEST_TIMEOUT_S_DEFAULT 10
#define TALLY_REQUEST_TIMEOUT_S_MAX 3600
#define TALLY_REQUEST_MIN_KIB_PER_S_DEFAULT 64
#define TALLY_IDLE_TIMEOUT_S_DEFAULT 300
#define TALLY_IDLE_TIMEOUT_S_MAX (7 * 24 * 3600)
/* Replies a client has not read, per connection: beyond it tallyd stops
 * reading that connection's requests. */
#define TALLY_UNREAD_REPLY_KIB_DEFAULT 1024
#define TALLY_UNREAD_REPLY_KIB_MIN 64
#define TALLY_UNREAD_REPLY_KIB_MAX (1024 * 1024)
/* Per connection: requests in flight, and long-polls among them (beyond
 * that a long-poll is answered at once, as if its wait_ms were 0). */
#define TALLY_IN_FLIGHT_PER_CONNECTION_DEFAULT 64
#define TALLY_LONG_POLLS_PER_CONNECTION_DEFAULT 16
_Static_assert(TALLY_LONG_POLLS_PER_CONNECTION_DEFAULT <= TALLY_IN_FLIGHT_PER_CONNECTION_DEFAULT,
               "long-polls are requests in flight");
_Static_assert(TALLY_IN_FLIGHT_PER_CONNECTION_DEFAULT <= TALLY_CONTEXTS_DEFAULT,
               "one connection holds at most a share of the contexts");
#define TALLY_GROUP_COMMANDS_MAX 8192     /* commands in one commit */
#define TALLY_GROUP_BYTES_MAX (8 * 1024 * 1024) /* request bytes in one commit */
#define TALLY_GROUP_APPLY_MS_MAX 100      /* time applying before committing */
#define TALLY_PUBLISH_EVENTS_MAX 100000   /* events published per commit */
/* PUB messages queued per subscriber (NNG_OPT_SENDBUF, NNG's largest):
 * a commit's events go out as a burst of messages, and NNG's PUB drops
 * the oldest queued message of a subscriber whose queue is full (its
 * default, 16, lost events of one 32-member chain, issue 16 item 7). */
#define TALLY_PUBLISH_QUEUE_MESSAGES 8192
/* Events larger than this are not published (only a webhook.received
 * event with a large body is): subscribers fill them in with log_read as
 * any event PUB did not bring, so a lagging subscriber's queue holds at
 * most TALLY_PUBLISH_QUEUE_MESSAGES x this (32 MiB), not x 260 KiB. */
#define TALLY_PUBLISH_EVENT_BYTES_MAX TALLY_EVENT_SMALL_BYTES_MAX

/* tallyd's listener watchdog (net/sp/listeners.c): how often it probes
 * each NNG listener (--listener-probe-ms; tests shorten it). */
#define TALLY_LISTENER_PROBE_MS_DEFAULT 2000
#define TALLY_LISTENER_PROBE_MS_MIN 20
#define TALLY_LISTENER_PROBE_MS_MAX 60000
_Static_assert(TALLY_LISTENER_PROBE_MS_MIN <= TALLY_LISTENER_PROBE_MS_DEFAULT &&
                   TALLY_LISTENER_PROBE_MS_DEFAULT <= TALLY_LISTENER_PROBE_MS_MAX,
               "the probe interval's default within its range");

/* The HTTP face (net/http/http.c, docs/OPERATIONS.md). */
#define TALLY_HTTP_BODY_BYTES_MAX (1024 * 1024)   /* a request's body; more: 413 */
#define TALLY_HTTP_HEADER_BYTES_MAX (32 * 1024)   /* request line and headers; more: refused */
#define TALLY_HTTP_TIMEOUT_S_DEFAULT 10           /* an idle or slow connection is closed */
#define TALLY_HTTP_TIMEOUT_S_MAX 3600
#define TALLY_HTTP_CONNECTIONS_DEFAULT 64         /* HTTP connections at once */
#define TALLY_HTTP_CONNECTIONS_PER_ADDRESS_DEFAULT 16 /* from one client address */
#define TALLY_HTTP_CONNECTIONS_MAX 4096
/* Places beyond the total for GET /metrics, /healthz and /readyz only. */
#define TALLY_HTTP_RESERVED_CONNECTIONS_DEFAULT 8
#define TALLY_HTTP_RESERVED_CONNECTIONS_MAX 256
/* GET /v1/events (net/http/sse.c, docs/PROTOCOL.md "The event stream"):
 * a comment line every heartbeat while idle; a stream ends after its
 * longest life (the client resumes with Last-Event-ID); at most this many
 * bytes rendered and not yet taken by the connection per stream (an event
 * whose message would pass it ends the stream). The default bound holds
 * the largest event document (768 KiB, a 256 KiB webhook body) with its
 * framing. */
#define TALLY_HTTP_STREAM_BLOCK_BYTES 16384 /* what the listener asks a stream for at once */
#define TALLY_HTTP_STREAM_HEARTBEAT_MS_DEFAULT 15000
#define TALLY_HTTP_STREAM_HEARTBEAT_MS_MIN 10
#define TALLY_HTTP_STREAM_HEARTBEAT_MS_MAX 300000
#define TALLY_HTTP_STREAM_LIFE_S_DEFAULT 3600
#define TALLY_HTTP_STREAM_LIFE_S_MAX 86400
#define TALLY_HTTP_STREAM_BUFFER_BYTES_DEFAULT 1048576
#define TALLY_HTTP_STREAM_BUFFER_BYTES_MIN 1024
#define TALLY_HTTP_STREAM_BUFFER_BYTES_MAX (16 * 1024 * 1024)
_Static_assert(TALLY_HTTP_STREAM_BUFFER_BYTES_DEFAULT > 786432 + 64,
               "the default stream buffer holds the largest event document and its framing");
/* A request's body earns its sender a second more than --http-timeout-s
 * per this many bytes received: slower, and the connection is closed. */
#define TALLY_HTTP_BODY_BYTES_PER_S_MIN (64 * 1024)
/* A newcomer over a connection limit evicts a connection idle (no request
 * begun) at least this long; younger ones are not taken from their
 * clients between two requests. */
#define TALLY_HTTP_EVICT_IDLE_MS_MIN 1000
/* Connections closed but not yet reaped by libmicrohttpd, beyond the
 * total and reserved places, for which it still accepts. */
#define TALLY_HTTP_CLOSING_CONNECTIONS_MAX 256

/* Webhook intake (net/http/webhooks.c, docs/WEBHOOKS.md). The delivery is kept
 * whole in one webhook.received event, which is what sets the event cap
 * (TALLY_EVENT_BYTES_MAX). */
#define TALLY_WEBHOOK_SOURCE_BYTES_MAX 55    /* "webhook:" + name is a consumer */
/* The consumer namespace of the intake: a client request naming a consumer
 * that starts with it is refused (consumer_reserved, net/ops/protocol.c). */
#define TALLY_WEBHOOK_CONSUMER_PREFIX "webhook:"
#define TALLY_WEBHOOK_EVENT_ID_BYTES_MAX 64  /* the provider's event id: the inbox key */
#define TALLY_WEBHOOK_EVENT_TYPE_BYTES_MAX 64
#define TALLY_WEBHOOK_BODY_BYTES_MAX (256 * 1024) /* a delivery's body; more: 413 */
#define TALLY_WEBHOOK_SOURCES_MAX 64
#define TALLY_WEBHOOK_SECRETS_MAX 4          /* per source, for rotation */
#define TALLY_WEBHOOK_SECRET_BYTES_MAX 256
#define TALLY_WEBHOOK_SECRET_BYTES_MIN 16     /* a key (decoded) shorter than this: refused */
#define TALLY_WEBHOOK_SECRET_FILE_BYTES_MAX 4096 /* a larger secret file: refused, never cut */
#define TALLY_WEBHOOK_TOLERANCE_S_DEFAULT 300
#define TALLY_WEBHOOK_TOLERANCE_S_MAX 86400
/* Deliveries waiting for the writer (--http-webhooks-in-flight); more: 503.
 * Below the HTTP connections, so that the refusal comes while places are
 * left for other clients. */
#define TALLY_WEBHOOK_IN_FLIGHT_DEFAULT 32
_Static_assert(TALLY_WEBHOOK_IN_FLIGHT_DEFAULT < TALLY_HTTP_CONNECTIONS_DEFAULT,
               "webhooks waiting for the writer leave HTTP connections for others");

/* The figures' history (net/metrics/figures_history.h, GET /v1/figures): one
 * sample a second for the last hour, in a ring allocated once at start;
 * the first this many subscribers (by name) are sampled, the others only
 * counted. */
#define TALLY_FIGURES_SAMPLES_MAX 3600
#define TALLY_FIGURES_INTERVAL_MS 1000
#define TALLY_FIGURES_SUBSCRIBERS_MAX 16
/* A file of the web console (--console-dir); larger: not served (500). */
#define TALLY_CONSOLE_FILE_BYTES_MAX (1024 * 1024)

/* Durable subscribers (log/subscriber.c, docs/SUBSCRIBERS.md). */
#define TALLY_SUBSCRIBERS_MAX 256
#define TALLY_SUBSCRIBER_NAME_BYTES_MAX 64
/* An outbound webhook endpoint of tally-relay (ledger/endpoint.h): its
 * name, as its subscriber relay:<name>, and why it was disabled. */
#define TALLY_ENDPOINT_NAME_BYTES_MAX 58
#define TALLY_ENDPOINT_REASON_BYTES_MAX 256
#define TALLY_ENDPOINT_SECRET_BYTES_MAX 64      /* an HMAC key, decoded (Standard Webhooks) */
#define TALLY_ENDPOINT_SECRET_TEXT_BYTES_MAX 100 /* whsec_ and the base64 of 64 bytes */
#define TALLY_ENDPOINT_OVERLAP_S_MAX (30u * 86400)
#define TALLY_ENDPOINT_OVERLAP_S_DEFAULT 86400u
/* An endpoint defined in tallyd (endpoint_create; docs/RELAY.md,
 * "Endpoints managed at run time"): how many, and its fields. */
#define TALLY_ENDPOINTS_DEFINED_MAX 32
#define TALLY_ENDPOINT_URL_BYTES_MAX 1024
#define TALLY_ENDPOINT_TYPES_MAX 16           /* as a subscriber's filter */
#define TALLY_ENDPOINT_TYPE_BYTES_MAX 31
#define TALLY_ENDPOINT_TYPES_BYTES_MAX (TALLY_ENDPOINT_TYPES_MAX * (TALLY_ENDPOINT_TYPE_BYTES_MAX + 1))
#define TALLY_ENDPOINT_SCHEDULE_BYTES_MAX 512 /* the retry schedule as text */
#define TALLY_ENDPOINT_BACKFILL_BYTES_MAX 20  /* none, all or a seq */
#define TALLY_ENDPOINT_TIMEOUT_MS_MAX 600000
/* The attempt log of tally-relay's endpoints (ledger/endpoint.h): what
 * one record op carries, what one attempt keeps, how long at most. */
#define TALLY_ATTEMPTS_RECORD_MAX 100           /* attempts of one endpoint_attempts_record */
#define TALLY_ATTEMPT_TEXT_BYTES_MAX 256        /* an attempt's error, its response's first bytes */
#define TALLY_ATTEMPT_RETENTION_S_MAX (366u * 86400)
#define TALLY_ATTEMPTS_SWEEP_MAX 1000           /* expired attempts one record op removes */
#define TALLY_ATTEMPTS_READ_MAX 1000            /* attempts one endpoint_attempts returns */
#define TALLY_ATTEMPTS_READ_DEFAULT 100
#define TALLY_SUB_FETCH_EVENTS_MAX 1000
#define TALLY_SUB_FETCH_EVENTS_DEFAULT 100
#define TALLY_SUB_FETCH_BYTES_MAX TALLY_LOG_READ_BYTES_MAX /* events delivered per fetch */
#define TALLY_SUB_ACK_SEQS_MAX 1000           /* seqs in one ack's done list */
#define TALLY_SUB_MAX_DELIVER_MAX 1000
#define TALLY_SUB_MAX_DELIVER_DEFAULT 5
#define TALLY_SUB_ACK_WAIT_MS_MIN 100
#define TALLY_SUB_ACK_WAIT_MS_MAX 86400000    /* a day */
#define TALLY_SUB_ACK_WAIT_MS_DEFAULT 30000
#define TALLY_SUB_BACKOFF_STEPS_MAX 8
#define TALLY_SUB_MAX_ACK_PENDING_MAX 10000
#define TALLY_SUB_MAX_ACK_PENDING_DEFAULT 1000
#define TALLY_SUB_ERROR_BYTES_MAX 256         /* nak error and park reason text */
#define TALLY_SUB_INSTANCE_BYTES_MAX 64       /* a consumer instance's id on sub_fetch */
#define TALLY_SUB_PARTITIONS_MAX 64           /* partitions of one subscriber (sub_create) */
#define TALLY_SUB_PARTITION_MEMBERS_MAX 64    /* instances one partitioned subscriber counts */
#define TALLY_DLQ_EXPIRE_ITEMS_MAX 256        /* dead letters one retention pass removes */
#define TALLY_DLQ_LIST_ENTRIES_MAX 1000
#define TALLY_DLQ_LIST_ENTRIES_DEFAULT 100
/* A subscriber's filter (docs/SUBSCRIBERS.md, "Filters"): event types,
 * entity kinds, a glob over the entitlement subject. */
#define TALLY_SUB_FILTER_TYPES_MAX 16
#define TALLY_SUB_FILTER_TYPE_BYTES_MAX 32
#define TALLY_SUB_FILTER_GLOB_BYTES_MAX 128
#define TALLY_SUB_FILTER_SKIP_EVENTS_MAX 10000 /* events one fetch skips past at most */
#define TALLY_SUB_OWNER_BYTES_MAX 128          /* contact, alert route */
#define TALLY_SUB_INACTIVE_EXPIRY_MS_MIN 1000
#define TALLY_SUB_INACTIVE_EXPIRY_MS_MAX (UINT64_C(366) * 86400000) /* a year */
#define TALLY_SUB_SHOW_IN_FLIGHT_MAX 100       /* in-flight events sub_get shows */
#define TALLY_SUB_EXPIRE_ITEMS_MAX 16          /* subscribers one retention pass expires */

_Static_assert(TALLY_CONSUMER_BYTES_MAX + TALLY_KEY_BYTES_MAX + 2 <= 511,
               "inbox key must fit an LMDB key (511 bytes)");
_Static_assert(8 + TALLY_CONSUMER_BYTES_MAX + TALLY_KEY_BYTES_MAX + 2 <= 511,
               "inbox_time key must fit an LMDB key");
_Static_assert(8 + 1 + 1 + TALLY_SUBJECT_BYTES_MAX + TALLY_FEATURE_BYTES_MAX <= 511,
               "expiry key for an entitlement must fit an LMDB key");
_Static_assert(TALLY_SUBJECT_BYTES_MAX <= 255 && TALLY_FEATURE_BYTES_MAX <= 255 &&
                   TALLY_CONSUMER_BYTES_MAX <= 255,
               "length prefixes of composite keys are one byte");
_Static_assert(TALLY_HOLD_TIMEOUT_S_MAX * INT64_C(1000) < TALLY_TIME_MS_MAX,
               "a hold timeout added to a valid time must not overflow");
_Static_assert(TALLY_GRANT_DURATION_MS_MAX < TALLY_TIME_MS_MAX,
               "a grant duration added to a valid time must not overflow");
_Static_assert(TALLY_BATCH_OPS_MAX <= TALLY_GROUP_COMMANDS_MAX,
               "one full batch request fits one commit");
_Static_assert(TALLY_COMMAND_EVENTS_MAX <= TALLY_PUBLISH_QUEUE_MESSAGES &&
                   TALLY_PUBLISH_QUEUE_MESSAGES <= 8192,
               "one command's events (a full chain with its expiries) fit a subscriber's PUB "
               "queue, which NNG 1.5 caps at 8192 messages");
_Static_assert(TALLY_BATCH_OPS_MAX * (TALLY_COMMAND_EVENTS_MAX / TALLY_CHAIN_COMMANDS_MAX) <=
                   TALLY_PUBLISH_QUEUE_MESSAGES,
               "one full batch request's events (3 per member at most) fit a subscriber's PUB "
               "queue (docs/PROTOCOL.md, Transport)");
_Static_assert(TALLY_EVENT_BYTES_MAX <= TALLY_LOG_READ_BYTES_MAX &&
                   TALLY_EVENT_BYTES_MAX <= TALLY_SUB_FETCH_BYTES_MAX,
               "a page's byte budget holds the largest event, so 'at least one event' stays "
               "within it");
_Static_assert(TALLY_LOG_READ_BYTES_MAX + 8 * TALLY_LOG_READ_EVENTS_MAX + 4096 <= TALLY_REPLY_BYTES_MAX,
               "a full log read (events and their bin headers) fits a reply");
_Static_assert(TALLY_SUB_FETCH_BYTES_MAX + 64 * TALLY_SUB_FETCH_EVENTS_MAX + 4096 <=
                   TALLY_REPLY_BYTES_MAX,
               "a full subscriber fetch fits a reply");
_Static_assert(TALLY_EVENT_SMALL_BYTES_MAX <= TALLY_EVENT_BYTES_MAX &&
                   TALLY_PUBLISH_EVENT_BYTES_MAX <= TALLY_EVENT_BYTES_MAX,
               "the small and published event sizes are within the cap");
_Static_assert(8 + TALLY_WEBHOOK_SOURCE_BYTES_MAX <= TALLY_CONSUMER_BYTES_MAX &&
                   TALLY_WEBHOOK_EVENT_ID_BYTES_MAX <= TALLY_KEY_BYTES_MAX,
               "a webhook's (webhook:<source>, event id) is an inbox key");
_Static_assert(TALLY_WEBHOOK_BODY_BYTES_MAX + 2 * (TALLY_WEBHOOK_SOURCE_BYTES_MAX +
                   TALLY_WEBHOOK_EVENT_ID_BYTES_MAX) + TALLY_WEBHOOK_EVENT_TYPE_BYTES_MAX +
                   TALLY_CONSUMER_BYTES_MAX + 400 <= TALLY_EVENT_BYTES_MAX,
               "a webhook.received event with the largest body fits an event");
_Static_assert(TALLY_WEBHOOK_BODY_BYTES_MAX <= TALLY_HTTP_BODY_BYTES_MAX,
               "the HTTP face reads a whole webhook body");
_Static_assert(TALLY_WEBHOOK_SECRET_BYTES_MIN <= TALLY_WEBHOOK_SECRET_BYTES_MAX &&
                   TALLY_WEBHOOK_SECRET_BYTES_MAX < TALLY_WEBHOOK_SECRET_FILE_BYTES_MAX &&
                   TALLY_WEBHOOK_EVENT_ID_BYTES_MAX >= 64,
               "a secret fits its file; a body's hex SHA-256 is an event id");
_Static_assert(1 + TALLY_SUBSCRIBER_NAME_BYTES_MAX + 1 + 8 <= 511,
               "a subscriber's in-flight key must fit an LMDB key");
_Static_assert(TALLY_SUB_FETCH_EVENTS_DEFAULT <= TALLY_SUB_FETCH_EVENTS_MAX &&
                   TALLY_SUB_MAX_ACK_PENDING_DEFAULT <= TALLY_SUB_MAX_ACK_PENDING_MAX,
               "subscriber defaults within maxima");
_Static_assert(TALLY_LOG_READ_EVENTS_DEFAULT <= TALLY_LOG_READ_EVENTS_MAX &&
                   TALLY_HISTORY_ENTRIES_DEFAULT <= TALLY_HISTORY_ENTRIES_MAX &&
                   TALLY_ACCOUNT_LIST_ENTRIES_DEFAULT <= TALLY_ACCOUNT_LIST_ENTRIES_MAX,
               "defaults within maxima");
/* A transfer's reply map is under 512 bytes, an account's under 400. */
_Static_assert(512 * TALLY_QUERY_ENTRIES_MAX + 4096 <= TALLY_REPLY_BYTES_MAX,
               "a full query page fits one reply");
_Static_assert(TALLY_QUERY_ENTRIES_DEFAULT <= TALLY_QUERY_ENTRIES_MAX &&
                   TALLY_QUERY_ENTRIES_MAX <= TALLY_QUERY_SCAN_ENTRIES_MAX,
               "a query page is within its scan bound");
_Static_assert(256 * TALLY_ACCOUNT_LIST_ENTRIES_MAX + 4096 <= TALLY_REPLY_BYTES_MAX,
               "a full account_list page fits a reply (an account map is under 256 bytes)");
_Static_assert(TALLY_MAP_SIZE_BYTES_MIN <= TALLY_MAP_SIZE_BYTES_DEFAULT &&
                   TALLY_MAP_SIZE_BYTES_DEFAULT <= TALLY_MAP_SIZE_BYTES_MAX,
               "default map size within bounds");

/* Cluster mode's command stream (net/cluster/, docs/CLUSTER.md, "The
 * stream"): the least a stream must have, the defaults tallyd creates it
 * with, and the bounds of its names and waits. */
#define TALLY_CLUSTER_REPLICAS_DEFAULT 3
#define TALLY_CLUSTER_REPLICAS_MAX 5 /* JetStream's own maximum */
#define TALLY_CLUSTER_DUPLICATE_WINDOW_MS_MIN INT64_C(120000)
#define TALLY_CLUSTER_DUPLICATE_WINDOW_MS_DEFAULT INT64_C(120000)
#define TALLY_CLUSTER_MSG_BYTES_MIN (1024 * 1024)
#define TALLY_CLUSTER_MAX_AGE_MS_DEFAULT INT64_C(604800000) /* 7 days */
#define TALLY_CLUSTER_STREAM_NAME_BYTES_MAX 32
#define TALLY_CLUSTER_URLS_MAX 16
#define TALLY_CLUSTER_MSG_ID_BYTES_MAX 128
#define TALLY_CLUSTER_SUBJECT_TOKEN_BYTES_MAX 16
#define TALLY_CLUSTER_REQUEST_MS_DEFAULT 5000 /* a PubAck or a JetStream API answer */
#define TALLY_CLUSTER_REQUEST_MS_MAX 600000
_Static_assert(TALLY_CLUSTER_REPLICAS_DEFAULT <= TALLY_CLUSTER_REPLICAS_MAX &&
                   TALLY_CLUSTER_DUPLICATE_WINDOW_MS_MIN <= TALLY_CLUSTER_DUPLICATE_WINDOW_MS_DEFAULT &&
                   TALLY_CLUSTER_REQUEST_MS_DEFAULT <= TALLY_CLUSTER_REQUEST_MS_MAX,
               "cluster defaults within bounds");
/* A cluster node's name (--node): 1-32 bytes of a-z 0-9 -. A read's
 * min_seq waits this long by default (--cluster-read-wait-ms), at most
 * the max. A message carries at most the writer's group bounds. */
#define TALLY_CLUSTER_NODE_BYTES_MAX 32
#define TALLY_CLUSTER_READ_WAIT_MS_DEFAULT 5000
#define TALLY_CLUSTER_READ_WAIT_MS_MAX 600000
/* With no writes, a tick is appended about this often (--cluster-tick-ms). */
#define TALLY_CLUSTER_TICK_MS_DEFAULT 1000
#define TALLY_CLUSTER_TICK_MS_MAX 3600000
/* Positions between two checkpoints (docs/CLUSTER.md, "Divergence is
 * detected, never served"): each is a message from every node, so the
 * least is well above the nodes a checkpoint counts (16). */
#define TALLY_CLUSTER_CHECKPOINT_EVERY_DEFAULT 1000
#define TALLY_CLUSTER_CHECKPOINT_EVERY_MIN 32
#define TALLY_CLUSTER_CHECKPOINT_EVERY_MAX 100000000
/* ... and at the first position of every such span of the log's time, so
 * that a node that diverged stops within about this much of it however
 * few positions pass (the ticks carry the time on). A constant: every
 * node of a cluster must take the same positions. */
#define TALLY_CLUSTER_CHECKPOINT_LOG_MS 10000
_Static_assert(TALLY_CLUSTER_CHECKPOINT_LOG_MS >= 10 * TALLY_CLUSTER_TICK_MS_DEFAULT,
               "a checkpoint of the log's time comes after several ticks at least");
/* /readyz fails while this node is more than this many messages behind. */
#define TALLY_CLUSTER_READY_LAG_DEFAULT 1000
/* How long tallyd tries to reach a JetStream with a leader at start. */
#define TALLY_CLUSTER_CONNECT_MS_MAX 60000
/* A write whose group JetStream took waits this long for this node's own
 * apply before it is answered cluster_unavailable (it is in the stream:
 * a retry with the same key replays). */
#define TALLY_CLUSTER_APPLY_WAIT_MS 30000
/* Messages of the stream that a node has already received are applied
 * together, in one transaction and one durable commit, up to these: the
 * messages, and their bytes (docs/CLUSTER.md, "Applying"). */
#define TALLY_CLUSTER_APPLY_MESSAGES_MAX 64
/* A node's groups of writes in flight at once: one being published, the
 * others published and waiting for this node's apply (docs/CLUSTER.md,
 * "Applying"). */
#define TALLY_CLUSTER_GROUPS_IN_FLIGHT 4
#define TALLY_CLUSTER_APPLY_BYTES_MAX (8 * 1024 * 1024)
_Static_assert(TALLY_CLUSTER_APPLY_BYTES_MAX >= TALLY_CLUSTER_MSG_BYTES_MIN,
               "a batch of messages takes at least one message of the largest size");

#endif

/*
 * quorum.h — inside net/cluster/ only: what stream.c lends the reader
 * (quorum.c), which reads every position of the stream from as many of
 * its replicas as make a majority and returns a message only when they
 * all hold the same bytes there (docs/CLUSTER.md, "Applying").
 */
#ifndef TALLY_NET_CLUSTER_QUORUM_H
#define TALLY_NET_CLUSTER_QUORUM_H

#include "net/cluster/stream.h"

#include <nats/nats.h>

/* A slice of a reader's wait: after a slice with nothing from a copy
 * while the stream holds more, that copy's consumer is made again. */
#define CLUSTER_READER_SLICE_MS 1000
/* The pause of cnats between two reconnects, and of a reader that has
 * no consumer. */
#define CLUSTER_RECONNECT_WAIT_MS 100

/* A JetStream context of its own on the stream's connection, whose
 * requests wait wait_ms unless told otherwise (jsCtx_Destroy it before
 * the stream closes); NULL when none can be made. */
jsCtx *cluster_stream_js_waiting(cluster_stream *s, int64_t wait_ms);

/* Whether cluster_stream_interrupt closed s's connection. */
bool cluster_stream_interrupted(cluster_stream *s);

/* How many of the stream's replicas make a majority: floor(R/2) + 1 of
 * the replicas the stream has (3: 2). */
size_t cluster_stream_quorum(const cluster_stream *s);

/* The tally code of a cnats status and a JetStream error code. */
int cluster_stream_code_of(natsStatus s, jsErrCode jerr);

/* Whether kind is a subject's last token: 1..16 bytes of a-z. */
bool cluster_kind_is_valid(const char *kind);

/* The Nats-Msg-Id of msg ("" when it has none). */
const char *cluster_msg_id_of(natsMsg *msg);

#endif

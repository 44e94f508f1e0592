/*
 * stream_scan.h — which events of a batch the JetStream stream already
 * holds (stream_scan.c; docs/RELAY.md, "Exactly once in the stream").
 */
#ifndef TALLY_RELAY_STREAM_SCAN_H
#define TALLY_RELAY_STREAM_SCAN_H

#include "relay/relay.h"

#include <nats/nats.h>

/* One event asked about; present is the answer. */
typedef struct relay_scan_want {
    const tally_event *event;
    bool present; /* a message with its id (Nats-Msg-Id) is in the stream */
} relay_scan_want;

/* Set wants[i].present for each of count events (stream_scan.c says how
 * far back it reads). 0 scanned; 1 a transient failure (no answer, the
 * connection away) and 2 an API error of JetStream, both with why set
 * and the answers unknown. */
int relay_stream_scan(jsCtx *js, const relay_nats *cfg, relay_scan_want *wants, size_t count,
                      char *why, size_t why_size);

#endif

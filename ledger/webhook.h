/*
 * webhook.h — the webhook_receive command: a verified webhook delivery
 * (net/http/webhooks.c checked its signature) becomes one webhook.received
 * event that carries it whole (docs/WEBHOOKS.md, docs/EVENTS.md). It
 * changes no account or entitlement: mapping a provider's event to
 * ledger commands is a subscriber's job (tools/tally_stripe_mapper.c).
 */
#ifndef TALLY_LEDGER_WEBHOOK_H
#define TALLY_LEDGER_WEBHOOK_H

#include "ledger/command.h"
#include "ledger/context.h"

/* Append the webhook.received event of cmd's delivery (validated) in ctx:
 * webhook_receive's row in ledger/command.c's op table. TALLY_ok or a
 * fault. */
int ledger_webhook_apply(ledger_ctx *ctx, const ledger_command *cmd);

#endif

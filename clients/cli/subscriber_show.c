/*
 * subscriber_show.c — `tally subscribers show NAME`: one subscriber's
 * metrics and settings and, for a partitioned one, each partition with
 * the instance holding it and the end of its lease.
 */
#include "config.h"

#include "clients/cli/tally_cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static json_t *holders_json(const tally_partition_holder *h, size_t count)
{
    json_t *list = json_array();
    for (size_t k = 0; list && k < count; k++) {
        json_t *one = json_pack("{s:I, s:s?, s:o?}", "partition", (json_int_t)h[k].partition,
                                "holder", h[k].holder[0] ? h[k].holder : NULL, "lease_until",
                                h[k].lease_until_ms ? json_time(h[k].lease_until_ms) : NULL);
        if (!one || json_array_append_new(list, one) != 0)
            cli_out_of_memory();
    }
    if (!list)
        cli_out_of_memory();
    return list;
}

static void show_text(const tally_subscriber_info *i, const tally_partition_holder *h,
                      size_t count)
{
    printf("name %s\nack_floor %" PRIu64 "\ndelivered_seq %" PRIu64 "\npending %" PRIu64
           "\nin_flight %" PRIu64 "\nredelivered %" PRIu64 "\ndead_letters %" PRIu64
           "\nmax_deliver %" PRIu32 "\nack_wait_ms %" PRIu32 "\nmax_ack_pending %" PRIu32
           "\npartitions %" PRIu32 "\n",
           i->name, i->ack_floor, i->delivered_seq, i->pending, i->in_flight, i->redelivered,
           i->dead_letters, i->max_deliver, i->ack_wait_ms, i->max_ack_pending, i->partitions);
    if (count == 0)
        return;
    static const char *const titles[] = {"PARTITION", "HOLDER", "LEASE_UNTIL_MS"};
    cli_table t;
    table_init(&t, titles, 3);
    for (size_t k = 0; k < count; k++)
        table_add(&t, "%" PRIu32 SEP "%s" SEP "%" PRId64, h[k].partition,
                  h[k].holder[0] ? h[k].holder : "-", h[k].lease_until_ms);
    table_print_free(&t);
}

int run_subscriber_show(cli *c)
{
    const char *name = c->v[SLOT_NAME].text;
    tally_subscriber_info info;
    static tally_partition_holder holders[TALLY_CLIENT_SUB_PARTITIONS_MAX];
    size_t count = 0;
    int rc = tally_subscriber_get(c->client, name, &info);
    if (rc == TALLY_ok)
        rc = tally_subscriber_partitions(c->client, name, holders,
                                         TALLY_CLIENT_SUB_PARTITIONS_MAX, &count);
    if (rc != TALLY_ok)
        return read_failure(c, "subscribers show", rc);
    if (!c->json) {
        show_text(&info, holders, count);
        return CLI_EXIT_OK;
    }
    json_t *o = subscriber_json(&info);
    if (!o || json_object_set_new(o, "partitions", json_integer(info.partitions)) != 0 ||
        json_object_set_new(o, "partition_holders", holders_json(holders, count)) != 0)
        cli_out_of_memory();
    json_emit(o);
    return CLI_EXIT_OK;
}

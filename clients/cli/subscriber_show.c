/*
 * subscriber_show.c — `tally subscribers show NAME`: one subscriber's
 * metrics, settings (filter, inactivity limit, the owner of its dead
 * letters), its partitions with the instance holding each and the end of
 * its lease, and its first in-flight events with why each waits
 * (attempts, holder, next delivery, the last nak's reason).
 */
#include "config.h"

#include "clients/cli/tally_cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static json_t *flight_json(const tally_in_flight_event *f)
{
    return json_pack("{s:o, s:I, s:b, s:s?, s:s?, s:o, s:I}", "seq", json_u64(f->seq),
                     "attempts", (json_int_t)f->attempts, "replay", (int)f->replay, "last_error",
                     f->last_error[0] ? f->last_error : NULL, "holder",
                     f->holder[0] ? f->holder : NULL, "deliver_after",
                     json_time(f->deliver_after_ms), "deliver_after_ms",
                     (json_int_t)f->deliver_after_ms);
}

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

static void settings_text(const tally_subscriber_info *i)
{
    printf("subscriber %s: ack floor %" PRIu64 ", delivered %" PRIu64 ", pending %" PRIu64
           ", in flight %" PRIu64 ", dead letters %" PRIu64 "\n",
           i->name, i->ack_floor, i->delivered_seq, i->pending, i->in_flight, i->dead_letters);
    printf("settings: max_deliver %u, ack_wait_ms %u, max_ack_pending %u, inactive_expiry_ms "
           "%" PRIu64 " (0: never)\n",
           i->max_deliver, i->ack_wait_ms, i->max_ack_pending, i->inactive_expiry_ms);
    printf("filter: types %s, kinds %s, subject %s\n", i->filter_types[0] ? i->filter_types : "any",
           i->filter_kinds[0] ? i->filter_kinds : "any",
           i->filter_subject[0] ? i->filter_subject : "any");
    printf("owner: contact %s, alert route %s\n", i->contact[0] ? i->contact : "-",
           i->alert_route[0] ? i->alert_route : "-");
    printf("partitions %" PRIu32 "\n", i->partitions);
}

static void holders_text(const tally_partition_holder *h, size_t count)
{
    static const char *const titles[] = {"PARTITION", "HOLDER", "LEASE_UNTIL_MS"};
    cli_table t;
    table_init(&t, titles, 3);
    for (size_t k = 0; k < count; k++)
        table_add(&t, "%" PRIu32 SEP "%s" SEP "%" PRId64, h[k].partition,
                  h[k].holder[0] ? h[k].holder : "-", h[k].lease_until_ms);
    table_print_free(&t);
}

static void flights_text(const tally_in_flight_event *f, size_t n)
{
    static const char *const titles[] = {"SEQ", "ATTEMPTS", "HOLDER", "NEXT_DELIVERY", "REPLAY",
                                         "LAST_ERROR"};
    cli_table t;
    table_init(&t, titles, 6);
    for (size_t k = 0; k < n; k++) {
        char when[40];
        time_text(f[k].deliver_after_ms, when);
        table_add(&t, "%" PRIu64 SEP "%u" SEP "%s" SEP "%s" SEP "%s" SEP "%s", f[k].seq,
                  f[k].attempts, f[k].holder[0] ? f[k].holder : "-", when,
                  f[k].replay ? "yes" : "no", f[k].last_error[0] ? f[k].last_error : "-");
    }
    table_print_free(&t);
}

static void show_json(const tally_subscriber_info *info, const tally_in_flight_event *flights,
                      size_t n, const tally_partition_holder *holders, size_t count)
{
    json_t *o = subscriber_json(info), *list = json_array();
    json_t *settings = subscriber_settings_json(info);
    if (!o || !list || !settings || json_object_update(o, settings) != 0 ||
        json_object_set_new(o, "partition_holders", holders_json(holders, count)) != 0)
        cli_out_of_memory();
    json_decref(settings);
    for (size_t k = 0; k < n; k++)
        if (json_array_append_new(list, flight_json(&flights[k])) != 0)
            cli_out_of_memory();
    if (json_object_set_new(o, "in_flight_events", list) != 0)
        cli_out_of_memory();
    json_emit(o);
}

int run_subscriber_show(cli *c)
{
    const char *name = c->v[SLOT_NAME].text;
    static tally_in_flight_event flights[TALLY_CLIENT_SUB_SHOW_IN_FLIGHT_MAX];
    static tally_partition_holder holders[TALLY_CLIENT_SUB_PARTITIONS_MAX];
    tally_subscriber_info info;
    size_t n = 0, count = 0;
    int rc = tally_subscriber_show(c->client, name, &info, flights,
                                   TALLY_CLIENT_SUB_SHOW_IN_FLIGHT_MAX, &n);
    if (rc == TALLY_ok && info.partitions > 1)
        rc = tally_subscriber_partitions(c->client, name, holders,
                                         TALLY_CLIENT_SUB_PARTITIONS_MAX, &count);
    if (rc != TALLY_ok)
        return read_failure(c, "subscriber", rc);
    if (c->json) {
        show_json(&info, flights, n, holders, count);
        return CLI_EXIT_OK;
    }
    settings_text(&info);
    if (count > 0)
        holders_text(holders, count);
    flights_text(flights, n);
    return CLI_EXIT_OK;
}

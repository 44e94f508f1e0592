/*
 * wire.c — see wire.h.
 */
#include "tests/support/wire.h"

#include "common/error.h"
#include "common/msgpack_safe.h"
#include "ledger/invariants.h"
#include "log/store.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int wire_vcall(tally_client *c, wire_reply *r, const char *op, const char *fmt,
                      va_list ap)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2 + strlen(fmt));
    msgpack_safe_pack_cstr(&pk, "v");
    msgpack_pack_uint32(&pk, 1);
    msgpack_safe_pack_cstr(&pk, "op");
    msgpack_safe_pack_cstr(&pk, op);
    for (const char *f = fmt; *f; f++) {
        msgpack_safe_pack_cstr(&pk, va_arg(ap, const char *));
        if (*f == 's') {
            msgpack_safe_pack_cstr(&pk, va_arg(ap, const char *));
        } else if (*f == 'u') {
            msgpack_pack_uint64(&pk, va_arg(ap, uint64_t));
        } else if (*f == 'i') {
            msgpack_pack_int64(&pk, va_arg(ap, int64_t));
        } else if (*f == 'b') {
            va_arg(ap, int) ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
        } else if (*f == 'x') {
            msgpack_safe_pack_bin(&pk, va_arg(ap, const uint8_t *), 16);
        } else if (*f == 'U') {
            unsigned n = va_arg(ap, unsigned);
            const uint64_t *v = va_arg(ap, const uint64_t *);
            msgpack_pack_array(&pk, n);
            for (unsigned i = 0; i < n; i++)
                msgpack_pack_uint64(&pk, v[i]);
        } else {
            ck_abort_msg("wire_call: unknown format letter %c", *f);
        }
    }
    memset(r, 0, sizeof(*r));
    int rc = tally_request_raw(c, sb.data, sb.size, &r->bytes, &r->len);
    msgpack_sbuffer_destroy(&sb);
    if (rc != TALLY_ok)
        return rc;
    msgpack_unpacked_init(&r->up);
    ck_assert_int_eq(msgpack_safe_unpack(r->bytes, r->len, 16, &r->up), TALLY_ok);
    r->map = &r->up.data;
    tally_str code;
    ck_assert(msgpack_safe_get_str(msgpack_safe_map_get(r->map, "code"), &code));
    snprintf(r->code, sizeof(r->code), "%.*s", (int)code.len, code.ptr);
    return TALLY_ok;
}

void wire_call(tally_client *c, wire_reply *r, const char *op, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = wire_vcall(c, r, op, fmt, ap);
    va_end(ap);
    ck_assert_msg(rc == TALLY_ok, "%s: no reply: %s", op, tally_strerror(rc));
}

int wire_try_call(tally_client *c, wire_reply *r, const char *op, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = wire_vcall(c, r, op, fmt, ap);
    va_end(ap);
    return rc;
}

void wire_done(wire_reply *r)
{
    msgpack_unpacked_destroy(&r->up);
    free(r->bytes);
}

const msgpack_object *wire_field(const msgpack_object *m, const char *key)
{
    const msgpack_object *o = msgpack_safe_map_get(m, key);
    ck_assert_msg(o != NULL, "reply has no %s", key);
    return o;
}

uint64_t wire_u64(const msgpack_object *m, const char *key)
{
    uint64_t v;
    ck_assert_msg(msgpack_safe_get_u64(wire_field(m, key), &v), "%s is not a uint", key);
    return v;
}

void wire_expect(wire_reply *r, const char *code)
{
    ck_assert_msg(strcmp(r->code, code) == 0, "code %s, expected %s", r->code, code);
}

static void print_finding(const char *check, const char *entity, const char *detail, void *ctx)
{
    (void)ctx;
    fprintf(stderr, "invariant %s: %s: %s\n", check, entity, detail);
}

void wire_assert_invariants(const char *data_dir)
{
    store *st;
    store_options so = {.path = data_dir, .read_only = true};
    ck_assert_int_eq(store_open(&so, &st), TALLY_ok);
    store_txn t;
    ck_assert_int_eq(store_txn_begin(st, NULL, true, &t), TALLY_ok);
    ledger_invariant_stats stats;
    ck_assert_int_eq(ledger_invariants_check(&t, print_finding, NULL, &stats), TALLY_ok);
    store_txn_abort(&t);
    store_close(st);
    ck_assert_msg(stats.findings == 0, "%llu invariant findings", (unsigned long long)stats.findings);
}

/* p's extra_args become extra_args (NULL: none; at most 7). */
static void extra_args_set(tallyd_proc *p, const char *const *extra_args)
{
    memset(p->extra_args, 0, sizeof(p->extra_args));
    int i = 0;
    for (; extra_args && extra_args[i] && i < TALLYD_EXTRA_ARGS_MAX - 1; i++)
        p->extra_args[i] = extra_args[i];
    ck_assert_msg(!extra_args || !extra_args[i], "more than %d extra tallyd args",
                  TALLYD_EXTRA_ARGS_MAX - 1);
}

static void client_open_on(const tallyd_proc *p, tally_client **c)
{
    tally_client_options o = {.url = p->url, .timeout_ms = 60000, .consumer = "test"};
    ck_assert_int_eq(tally_client_open(&o, c), TALLY_ok);
}

void wire_server_start(tallyd_proc *p, tally_client **c, const char *const *extra_args)
{
    memset(p, 0, sizeof(*p));
    extra_args_set(p, extra_args);
    tallyd_start(p);
    client_open_on(p, c);
}

void wire_server_restart(tallyd_proc *p, tally_client **c, const char *const *extra_args)
{
    extra_args_set(p, extra_args);
    tallyd_restart(p);
    client_open_on(p, c);
}

void wire_server_stop(tallyd_proc *p, tally_client **c)
{
    tally_client_close(*c);
    *c = NULL;
    ck_assert_int_eq(tallyd_stop(p), 0);
    wire_assert_invariants(p->data_dir);
}

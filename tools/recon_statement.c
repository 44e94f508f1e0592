/*
 * recon_statement.c — loading a statement file and comparing it with a
 * store snapshot (see recon_statement.h; the formats are in
 * docs/OPERATIONS.md).
 *
 * Loading reads the file a character at a time into a bounded line buffer,
 * so a line without an end, a NUL byte or a file of millions of lines is a
 * clear error or a bounded cost, never a truncated value. Each entry goes
 * into a hash table keyed by account id (8 bytes) or event id (16 bytes);
 * the comparison walks the store once (accounts, or the log) and marks what
 * it finds, and whatever is left unmarked is extra.
 */
#include "tools/recon_statement.h"

#include "common/error.h"
#include "common/log_event.h"
#include "common/table.h"
#include "ledger/account.h"
#include "ledger/retention.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Balance fields a statement may give, in column order of the report. */
enum {
    FIELD_DEBITS_POSTED,
    FIELD_CREDITS_POSTED,
    FIELD_DEBITS_PENDING,
    FIELD_CREDITS_PENDING,
    FIELD_BALANCE, /* credits_posted - debits_posted */
    BALANCE_FIELDS
};

static const char *const field_names[BALANCE_FIELDS] = {
    "debits_posted", "credits_posted", "debits_pending", "credits_pending", "balance",
};

/* CSV columns: the id, then at most one column per field. */
#define CSV_COLUMNS_MAX (1 + BALANCE_FIELDS)
#define DETAIL_BYTES 256

typedef enum column_role {
    ROLE_ACCOUNT_ID = -1,
    ROLE_EVENT_ID = -2,
    ROLE_SEQ = -3,
    ROLE_UNKNOWN = -4,
    /* 0 .. BALANCE_FIELDS-1: a balance field */
} column_role;

/* What every entry has, first in both kinds of entry. */
typedef struct entry_head {
    uint64_t line;
    uint64_t duplicate_line; /* the first later line with the same id */
    uint64_t duplicates;
    bool seen; /* found in the store by the comparison */
} entry_head;

typedef struct balance_entry {
    entry_head head;
    int64_t expected[BALANCE_FIELDS];
    uint8_t fields; /* bit i set: expected[i] was given */
} balance_entry;

typedef struct event_entry {
    entry_head head;
    uint64_t seq; /* 0: not given */
} event_entry;

/* A comparison in progress (recon_statement_begin .. finish). */
typedef struct compare {
    struct recon_statement *s;
    store_txn *t;
    const recon_statement_options *opt;
    recon_statement_report_fn fn;
    void *ctx;
    recon_statement_counts counts;
    uint64_t floor_seq; /* log retention removed the events up to here */
    uint64_t walked;
    int fault;
} compare;

struct recon_statement {
    recon_statement_kind kind;
    recon_statement_format format;
    table *entries;
    uint64_t lines; /* entries loaded, duplicates included */
    compare cmp;
};

recon_statement_kind recon_statement_kind_of(const recon_statement *s) { return s->kind; }
recon_statement_format recon_statement_format_of(const recon_statement *s) { return s->format; }
uint64_t recon_statement_entries(const recon_statement *s) { return s->lines; }

const char *recon_statement_kind_name(recon_statement_kind kind)
{
    return kind == RECON_STATEMENT_BALANCES ? "balances" : "events";
}

const char *recon_statement_format_name(recon_statement_format format)
{
    return format == RECON_STATEMENT_CSV ? "csv" : "json_lines";
}

void recon_statement_free(recon_statement *s)
{
    if (s == NULL)
        return;
    table_destroy(s->entries);
    free(s);
}

/* ---- loading ---- */

typedef struct loader {
    recon_statement *s;
    const char *path;
    FILE *file;
    uint64_t line_no;
    char *err;
    size_t err_bytes;
    char line[RECON_STATEMENT_LINE_BYTES_MAX + 1];
    size_t line_len;
    int columns;
    int column_role[CSV_COLUMNS_MAX];
} loader;

static int fail(loader *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(loader *l, const char *fmt, ...)
{
    char what[RECON_STATEMENT_ERROR_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(l->err, l->err_bytes, "%s:%" PRIu64 ": %s", l->path, l->line_no, what);
    return TALLY_invalid_argument;
}

/* Next line into l->line (without its end: \n or \r\n). Returns TALLY_ok,
 * TALLY_not_found at the end of the file, or an error. */
static int read_line(loader *l)
{
    l->line_len = 0;
    int c = getc_unlocked(l->file);
    if (c == EOF)
        return ferror(l->file) ? TALLY_io_error : TALLY_not_found;
    l->line_no++;
    for (; c != EOF && c != '\n'; c = getc_unlocked(l->file)) {
        if (c == '\0')
            return fail(l, "a NUL byte: not a text file");
        if (l->line_len == RECON_STATEMENT_LINE_BYTES_MAX)
            return fail(l, "line longer than %d bytes", RECON_STATEMENT_LINE_BYTES_MAX);
        l->line[l->line_len++] = (char)c;
    }
    if (ferror(l->file))
        return TALLY_io_error;
    if (l->line_len > 0 && l->line[l->line_len - 1] == '\r')
        l->line_len--;
    l->line[l->line_len] = '\0';
    /* A UTF-8 byte order mark, as spreadsheets write one, opens line 1. */
    if (l->line_no == 1 && l->line_len >= 3 && memcmp(l->line, "\xef\xbb\xbf", 3) == 0) {
        memmove(l->line, l->line + 3, l->line_len - 2);
        l->line_len -= 3;
    }
    return TALLY_ok;
}

static bool is_blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t')
            return false;
    return true;
}

/* Decimal digits only, no sign, no overflow. */
static bool parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (*s == '\0')
        return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* An optional '-', then decimal digits; within int64 (never INT64_MIN). */
static bool parse_i64(const char *s, int64_t *out)
{
    bool negative = *s == '-';
    uint64_t v;
    if (!parse_u64(s + negative, &v) || v > (uint64_t)INT64_MAX)
        return false;
    *out = negative ? -(int64_t)v : (int64_t)v;
    return true;
}

/* Count one line with this id. *entry is its new (zeroed) table entry, or
 * NULL when an earlier line had the id: the first line's values stand and
 * the repetition is counted on it. */
static int add_entry(loader *l, const void *id, size_t id_len, void **entry)
{
    if (l->s->lines == RECON_STATEMENT_ENTRIES_MAX)
        return fail(l, "more than %" PRIu64 " entries", RECON_STATEMENT_ENTRIES_MAX);
    int inserted;
    entry_head *head = table_upsert(l->s->entries, id, id_len, &inserted);
    if (head == NULL)
        return TALLY_out_of_memory;
    l->s->lines++;
    *entry = inserted ? head : NULL;
    if (inserted)
        head->line = l->line_no;
    else if (head->duplicates++ == 0)
        head->duplicate_line = l->line_no;
    return TALLY_ok;
}

static int add_balance(loader *l, uint64_t account_id, const int64_t *values, uint8_t fields)
{
    uint8_t key[8];
    put_u64_be(key, account_id);
    void *slot = NULL;
    int rc = add_entry(l, key, 8, &slot);
    balance_entry *e = slot;
    if (rc == TALLY_ok && e != NULL) {
        e->fields = fields;
        memcpy(e->expected, values, sizeof(e->expected));
    }
    return rc;
}

static int add_event(loader *l, const tally_id128 *id, uint64_t seq)
{
    void *slot = NULL;
    int rc = add_entry(l, id->bytes, 16, &slot);
    event_entry *e = slot;
    if (rc == TALLY_ok && e != NULL)
        e->seq = seq;
    return rc;
}

/* The value of balance field f, checked for its range. */
static int check_field(loader *l, int f, const char *text, int64_t *out)
{
    if (!parse_i64(text, out))
        return fail(l, "%s: not an integer within int64: '%s'", field_names[f], text);
    if (f != FIELD_BALANCE && *out < 0)
        return fail(l, "%s: must not be negative: '%s'", field_names[f], text);
    return TALLY_ok;
}

static int check_account_id(loader *l, const char *text, uint64_t *out)
{
    if (!parse_u64(text, out) || *out == 0)
        return fail(l, "account_id: not an id 1..2^64-1: '%s'", text);
    return TALLY_ok;
}

static int check_event_id(loader *l, const char *text, tally_id128 *out)
{
    if (!tally_id128_from_hex(text, out))
        return fail(l, "event_id: not 32 hex digits (a UUID, dashes allowed): '%s'", text);
    return TALLY_ok;
}

static int check_seq(loader *l, const char *text, uint64_t *out)
{
    if (!parse_u64(text, out) || *out == 0)
        return fail(l, "seq: not a seq 1..2^64-1: '%s'", text);
    return TALLY_ok;
}

/* ---- CSV ---- */

/* Split l->line at commas, in place, into at most max cells (trimmed of
 * blanks and of one pair of double quotes). Returns the count, or max + 1
 * when there are more. */
static int split_cells(loader *l, char **cells, int max)
{
    int n = 0;
    char *p = l->line;
    for (;;) {
        char *end = strchr(p, ',');
        if (end)
            *end = '\0';
        if (n == max)
            return max + 1;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t len = strlen(p);
        while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            p[--len] = '\0';
        if (len >= 2 && p[0] == '"' && p[len - 1] == '"') {
            p[len - 1] = '\0';
            p++;
        }
        cells[n++] = p;
        if (!end)
            return n;
        p = end + 1;
    }
}

static int column_role_of(const char *name)
{
    if (strcmp(name, "account_id") == 0)
        return ROLE_ACCOUNT_ID;
    if (strcmp(name, "event_id") == 0)
        return ROLE_EVENT_ID;
    if (strcmp(name, "seq") == 0)
        return ROLE_SEQ;
    for (int f = 0; f < BALANCE_FIELDS; f++)
        if (strcmp(name, field_names[f]) == 0)
            return f;
    return ROLE_UNKNOWN;
}

static int csv_header(loader *l)
{
    char *cells[CSV_COLUMNS_MAX + 1];
    int n = split_cells(l, cells, CSV_COLUMNS_MAX);
    if (n > CSV_COLUMNS_MAX)
        return fail(l, "header: more than %d columns", CSV_COLUMNS_MAX);
    int ids = 0, fields = 0, seqs = 0, kind = 0;
    for (int i = 0; i < n; i++) {
        int role = column_role_of(cells[i]);
        if (role == ROLE_UNKNOWN)
            return fail(l, "header: unknown column '%s' (expected account_id with balance "
                           "columns, or event_id with an optional seq)", cells[i]);
        for (int j = 0; j < i; j++)
            if (l->column_role[j] == role)
                return fail(l, "header: column '%s' appears twice", cells[i]);
        l->column_role[i] = role;
        ids += role == ROLE_ACCOUNT_ID || role == ROLE_EVENT_ID;
        fields += role >= 0;
        seqs += role == ROLE_SEQ;
        if (role == ROLE_ACCOUNT_ID)
            kind = RECON_STATEMENT_BALANCES;
        if (role == ROLE_EVENT_ID)
            kind = RECON_STATEMENT_EVENTS;
    }
    l->columns = n;
    if (ids != 1)
        return fail(l, "header: needs exactly one of account_id or event_id");
    if (kind == RECON_STATEMENT_BALANCES && (fields == 0 || seqs))
        return fail(l, "header: account_id needs one or more balance columns (debits_posted, "
                       "credits_posted, debits_pending, credits_pending, balance) and no seq");
    if (kind == RECON_STATEMENT_EVENTS && fields)
        return fail(l, "header: event_id takes only an optional seq column");
    l->s->kind = kind;
    return TALLY_ok;
}

static int csv_row(loader *l)
{
    char *cells[CSV_COLUMNS_MAX + 1];
    int n = split_cells(l, cells, CSV_COLUMNS_MAX);
    if (n != l->columns)
        return fail(l, "%s%d cells, the header has %d", n > CSV_COLUMNS_MAX ? "more than " : "",
                    n > CSV_COLUMNS_MAX ? CSV_COLUMNS_MAX : n, l->columns);
    uint64_t account_id = 0, seq = 0;
    tally_id128 event_id;
    int64_t values[BALANCE_FIELDS] = {0};
    uint8_t fields = 0;
    int rc = TALLY_ok;
    for (int i = 0; i < n && rc == TALLY_ok; i++) {
        int role = l->column_role[i];
        if (role == ROLE_ACCOUNT_ID)
            rc = check_account_id(l, cells[i], &account_id);
        else if (role == ROLE_EVENT_ID)
            rc = check_event_id(l, cells[i], &event_id);
        else if (role == ROLE_SEQ)
            rc = check_seq(l, cells[i], &seq);
        else {
            rc = check_field(l, role, cells[i], &values[role]);
            fields |= (uint8_t)(1u << role);
        }
    }
    if (rc != TALLY_ok)
        return rc;
    return l->s->kind == RECON_STATEMENT_BALANCES ? add_balance(l, account_id, values, fields)
                                                  : add_event(l, &event_id, seq);
}

/* ---- JSON lines ---- */

/* A JSON integer or a decimal string, as text (u64 ids above 2^63-1 can
 * only be strings in JSON that jansson reads). */
static bool json_number_text(const json_t *v, char out[32])
{
    if (json_is_integer(v)) {
        snprintf(out, 32, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return true;
    }
    if (json_is_string(v) && json_string_length(v) < 32) {
        snprintf(out, 32, "%s", json_string_value(v));
        return true;
    }
    return false;
}

static int json_balance(loader *l, const json_t *o)
{
    const json_t *id = json_object_get(o, "account_id");
    if (id == NULL)
        id = json_object_get(o, "id");
    char text[32];
    if (!json_number_text(id, text))
        return fail(l, "account_id: not an integer or a decimal string");
    uint64_t account_id;
    int rc = check_account_id(l, text, &account_id);
    int64_t values[BALANCE_FIELDS] = {0};
    uint8_t fields = 0;
    for (int f = 0; f < BALANCE_FIELDS && rc == TALLY_ok; f++) {
        const json_t *v = json_object_get(o, field_names[f]);
        if (v == NULL)
            continue;
        if (!json_number_text(v, text))
            return fail(l, "%s: not an integer or a decimal string", field_names[f]);
        rc = check_field(l, f, text, &values[f]);
        fields |= (uint8_t)(1u << f);
    }
    if (rc == TALLY_ok && fields == 0)
        return fail(l, "no balance field (debits_posted, credits_posted, debits_pending, "
                       "credits_pending, balance)");
    return rc == TALLY_ok ? add_balance(l, account_id, values, fields) : rc;
}

static int json_event(loader *l, const json_t *o)
{
    const json_t *id = json_object_get(o, "event_id");
    if (!json_is_string(id))
        return fail(l, "event_id: not a string");
    tally_id128 event_id;
    int rc = check_event_id(l, json_string_value(id), &event_id);
    const json_t *seq_value = json_object_get(o, "seq");
    uint64_t seq = 0;
    char text[32];
    if (rc == TALLY_ok && seq_value != NULL && !json_is_null(seq_value)) {
        if (!json_number_text(seq_value, text))
            return fail(l, "seq: not an integer or a decimal string");
        rc = check_seq(l, text, &seq);
    }
    return rc == TALLY_ok ? add_event(l, &event_id, seq) : rc;
}

static int json_line(loader *l)
{
    json_error_t e;
    json_t *o = json_loadb(l->line, l->line_len, JSON_REJECT_DUPLICATES, &e);
    if (o == NULL)
        return fail(l, "not JSON: %s", e.text);
    int rc;
    bool has_event = json_object_get(o, "event_id") != NULL;
    bool has_account = json_object_get(o, "account_id") != NULL ||
                       json_object_get(o, "id") != NULL;
    recon_statement_kind kind = has_event ? RECON_STATEMENT_EVENTS : RECON_STATEMENT_BALANCES;
    if (!json_is_object(o))
        rc = fail(l, "not a JSON object");
    else if (has_event == has_account)
        rc = fail(l, "needs exactly one of event_id or account_id (or id)");
    else if (l->s->kind != 0 && l->s->kind != kind)
        rc = fail(l, "a %s line in a statement of %s", recon_statement_kind_name(kind),
                  recon_statement_kind_name(l->s->kind));
    else {
        l->s->kind = kind;
        rc = kind == RECON_STATEMENT_EVENTS ? json_event(l, o) : json_balance(l, o);
    }
    json_decref(o);
    return rc;
}

static int load_lines(loader *l)
{
    int rc;
    bool first = true;
    while ((rc = read_line(l)) == TALLY_ok) {
        if (is_blank(l->line))
            continue;
        if (first) {
            l->s->format = l->line[strspn(l->line, " \t")] == '{' ? RECON_STATEMENT_JSON_LINES
                                                                   : RECON_STATEMENT_CSV;
            first = false;
            if (l->s->format == RECON_STATEMENT_CSV) {
                rc = csv_header(l);
                if (rc != TALLY_ok)
                    return rc;
                continue;
            }
        }
        rc = l->s->format == RECON_STATEMENT_CSV ? csv_row(l) : json_line(l);
        if (rc != TALLY_ok)
            return rc;
    }
    if (rc == TALLY_io_error)
        snprintf(l->err, l->err_bytes, "%s: read error after line %" PRIu64, l->path,
                 l->line_no);
    if (rc != TALLY_not_found)
        return rc;
    if (first)
        return fail(l, "empty: a statement needs a CSV header line or JSON lines");
    return TALLY_ok;
}

int recon_statement_load(const char *path, recon_statement **out, char *err, size_t err_bytes)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        int e = errno;
        snprintf(err, err_bytes, "%s: %s", path, strerror(e));
        return e == ENOENT ? TALLY_not_found
               : e == EACCES ? TALLY_read_only
               : e == ENOMEM ? TALLY_out_of_memory : TALLY_io_error;
    }
    loader *l = calloc(1, sizeof(*l));
    recon_statement *s = calloc(1, sizeof(*s));
    if (s)
        s->entries = table_create(sizeof(balance_entry) > sizeof(event_entry)
                                      ? sizeof(balance_entry)
                                      : sizeof(event_entry));
    int rc = TALLY_out_of_memory;
    if (l && s && s->entries) {
        *l = (loader){.s = s, .path = path, .file = f, .err = err, .err_bytes = err_bytes};
        rc = load_lines(l);
    }
    if (rc == TALLY_out_of_memory)
        snprintf(err, err_bytes, "%s: out of memory after %" PRIu64 " entries", path,
                 s ? s->lines : 0);
    fclose(f);
    free(l);
    if (rc != TALLY_ok) {
        recon_statement_free(s);
        return rc;
    }
    *out = s;
    return TALLY_ok;
}

/* ---- comparing ---- */


static void finding(compare *c, const char *kind, const char *entity, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void finding(compare *c, const char *kind, const char *entity, const char *fmt, ...)
{
    char detail[DETAIL_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    if (c->fn)
        c->fn(kind, entity, detail, c->ctx);
}

static bool progress(compare *c, uint64_t total)
{
    c->walked++;
    if (!c->opt->progress ||
        (c->walked % LEDGER_INVARIANT_PROGRESS_ITEMS != 0 && c->walked != total))
        return true;
    if (c->opt->progress("statement", c->walked, total, c->opt->progress_ctx))
        return true;
    c->fault = TALLY_shutting_down;
    return false;
}

static void account_entity(uint64_t id, char out[64]) { snprintf(out, 64, "account:%" PRIu64, id); }

static void event_entity(const tally_id128 *id, char out[64])
{
    char hex[33];
    tally_id128_to_hex(id, hex);
    snprintf(out, 64, "event:%s", hex);
}

static void stored_fields(const ledger_account *a, int64_t out[BALANCE_FIELDS])
{
    out[FIELD_DEBITS_POSTED] = a->debits_posted;
    out[FIELD_CREDITS_POSTED] = a->credits_posted;
    out[FIELD_DEBITS_PENDING] = a->debits_pending;
    out[FIELD_CREDITS_PENDING] = a->credits_pending;
    out[FIELD_BALANCE] = a->credits_posted - a->debits_posted; /* both in 0..INT64_MAX */
}

/* |x - y| without overflow. */
static uint64_t distance(int64_t x, int64_t y)
{
    return x >= y ? (uint64_t)x - (uint64_t)y : (uint64_t)y - (uint64_t)x;
}

/* One stored account against its statement entry. */
static void compare_balance(compare *c, const ledger_account *a, balance_entry *e,
                            const char *entity)
{
    int64_t have[BALANCE_FIELDS];
    stored_fields(a, have);
    char detail[DETAIL_BYTES] = "";
    size_t len = 0;
    bool beyond = false, drifted = false;
    for (int f = 0; f < BALANCE_FIELDS; f++) {
        if (!(e->fields & (1u << f)) || e->expected[f] == have[f])
            continue;
        bool over = distance(e->expected[f], have[f]) > c->opt->drift;
        beyond |= over;
        drifted |= !over;
        if (over && len < sizeof(detail))
            len += (size_t)snprintf(detail + len, sizeof(detail) - len,
                                    "%s%s: statement %" PRId64 ", store %" PRId64,
                                    len ? "; " : "", field_names[f], e->expected[f], have[f]);
    }
    if (beyond) {
        c->counts.mismatched++;
        finding(c, "mismatched", entity, "%s (statement line %" PRIu64 ", drift %" PRIu64 ")",
                detail, e->head.line, c->opt->drift);
        return;
    }
    c->counts.matched++;
    c->counts.within_drift += drifted;
}

static int compare_accounts(compare *c)
{
    uint64_t total = 0;
    int rc = store_count(c->t, STORE_DB_ACCOUNTS, &total);
    MDB_cursor *cur;
    if (rc == TALLY_ok)
        rc = store_cursor_open(c->t, STORE_DB_ACCOUNTS, &cur);
    if (rc != TALLY_ok)
        return rc;
    MDB_val k, v;
    int mrc;
    for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == MDB_SUCCESS;
         mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (!progress(c, total))
            break;
        uint64_t id = k.mv_size == 8 ? get_u64_be(k.mv_data) : 0;
        char entity[64];
        account_entity(id, entity);
        balance_entry *e = k.mv_size == 8 ? table_find(c->s->entries, k.mv_data, 8) : NULL;
        ledger_account a;
        bool readable = ledger_account_decode(id, v.mv_data, v.mv_size, &a) == TALLY_ok;
        if (e == NULL) {
            c->counts.missing++;
            finding(c, "missing", entity, "in the store (ledger %" PRIu32 "), not in the statement",
                    readable ? a.ledger : 0);
            continue;
        }
        e->head.seen = true;
        if (!readable) {
            c->counts.mismatched++;
            finding(c, "mismatched", entity,
                    "the stored record is corrupt (statement line %" PRIu64 ")", e->head.line);
            continue;
        }
        compare_balance(c, &a, e, entity);
    }
    if (mrc != MDB_SUCCESS && mrc != MDB_NOTFOUND)
        rc = store_translate(mrc);
    mdb_cursor_close(cur);
    return rc == TALLY_ok ? c->fault : rc;
}

void recon_statement_event(const log_event *ev, void *statement)
{
    recon_statement *s = statement;
    compare *c = &s->cmp;
    assert(c->s == s);
    if (s->kind != RECON_STATEMENT_EVENTS)
        return;
    char entity[64];
    event_entity(&ev->id, entity);
    event_entry *e = table_find(s->entries, ev->id.bytes, 16);
    uint64_t through = c->opt->through_seq ? c->opt->through_seq : UINT64_MAX;
    if (e != NULL) {
        e->head.seen = true;
        if (e->seq != 0 && e->seq != ev->seq) {
            c->counts.mismatched++;
            finding(c, "mismatched", entity,
                    "statement seq %" PRIu64 ", log seq %" PRIu64 " (statement line %" PRIu64 ")",
                    e->seq, ev->seq, e->head.line);
        } else {
            c->counts.matched++;
        }
    } else if (ev->seq <= through) {
        c->counts.missing++;
        finding(c, "missing", entity, "seq %" PRIu64 " (%.*s) is not in the statement", ev->seq,
                (int)ev->type.len, ev->type.ptr);
    }
}

/* What the walk did not see: extra entries, and every duplicate. */
static int report_leftovers(const void *key, size_t key_len, void *value, void *ctx)
{
    compare *c = ctx;
    const entry_head *e = value;
    char entity[64];
    if (c->s->kind == RECON_STATEMENT_BALANCES) {
        account_entity(key_len == 8 ? get_u64_be(key) : 0, entity);
    } else {
        tally_id128 id;
        memcpy(id.bytes, key, 16);
        event_entity(&id, entity);
    }
    if (!e->seen && c->s->kind == RECON_STATEMENT_EVENTS &&
        ((const event_entry *)value)->seq != 0 &&
        ((const event_entry *)value)->seq <= c->floor_seq) {
        c->counts.below_floor++; /* removed by log retention: nothing to compare */
    } else if (!e->seen) {
        c->counts.extra++;
        finding(c, "extra", entity, "not in the %s (statement line %" PRIu64 ")",
                c->s->kind == RECON_STATEMENT_BALANCES ? "store" : "log", e->line);
    }
    if (e->duplicates) {
        c->counts.duplicates += e->duplicates;
        finding(c, "duplicate", entity,
                "listed %" PRIu64 " times: line %" PRIu64 ", again at line %" PRIu64,
                e->duplicates + 1, e->line, e->duplicate_line);
    }
    return 0;
}

int recon_statement_begin(recon_statement *s, store_txn *t,
                          const recon_statement_options *options, recon_statement_report_fn fn,
                          void *ctx)
{
    ledger_log_floor floor;
    int rc = ledger_log_floor_get(t, &floor);
    s->cmp = (compare){.s = s, .t = t, .opt = options, .fn = fn, .ctx = ctx,
                       .counts = {.entries = s->lines},
                       .floor_seq = rc == TALLY_ok ? floor.seq : 0};
    return rc;
}

int recon_statement_finish(recon_statement *s, recon_statement_counts *counts)
{
    compare *c = &s->cmp;
    assert(c->s == s);
    int rc = s->kind == RECON_STATEMENT_BALANCES ? compare_accounts(c) : TALLY_ok;
    if (rc == TALLY_ok)
        table_each(s->entries, report_leftovers, c);
    *counts = c->counts;
    return rc;
}

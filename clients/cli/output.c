/*
 * output.c — what every command of `tally` prints with: usage errors and exit
 * codes, the aligned text tables, the JSON values, and how a failed read or
 * write is told to a person.
 */
#include "config.h"

#include "clients/cli/tally_cli.h"

#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void cli_out_of_memory(void)
{
    fputs("tally: out of memory\n", stderr);
    exit(CLI_EXIT_REJECTED);
}

int usage_error(const cli *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tally: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (c->command)
        fprintf(stderr, "\nTry 'tally %s --help'.\n", c->command->name);
    else
        fputs("\nTry 'tally --help'.\n", stderr);
    return CLI_EXIT_USAGE;
}

int exit_code_of(int code)
{
    switch (code) {
    case TALLY_ok: return CLI_EXIT_OK;
    case TALLY_unreachable:
    case TALLY_timed_out:
    case TALLY_overloaded:
    case TALLY_shutting_down: return CLI_EXIT_UNREACHABLE;
    case TALLY_invalid_argument: return CLI_EXIT_USAGE; /* refused by libtally: nothing sent */
    case TALLY_not_found: return CLI_EXIT_REJECTED; /* an answer, not a fault */
    default:
        /* storage_full, io_error, internal, ...: the server stored nothing
         * and the same key may be sent again */
        return tally_error_class_of(code) == TALLY_CLASS_FAULT ? CLI_EXIT_FAULT
                                                                : CLI_EXIT_REJECTED;
    }
}

bool is_transport_fault(int code) { return exit_code_of(code) == CLI_EXIT_UNREACHABLE; }

/* ---- tables and JSON ---- */

void table_init(cli_table *t, const char *const *titles, size_t columns)
{
    assert(columns >= 1 && columns <= CLI_TABLE_COLUMNS_MAX);
    memset(t, 0, sizeof(*t));
    t->titles = titles;
    t->columns = columns;
}

/* Add one row of t->columns printf-formatted cells, separated by SEP in fmt.
 * Control characters in the cells (from keys, subjects...) print as '?'. */
void table_add(cli_table *t, const char *fmt, ...)
{
    char line[CLI_TABLE_CELL_BYTES_MAX * 16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (t->rows == t->capacity) {
        t->capacity = t->capacity ? t->capacity * 2 : 16;
        t->cells = realloc(t->cells, t->capacity * t->columns * sizeof(char *));
        if (!t->cells)
            cli_out_of_memory();
    }
    char *rest = line;
    for (size_t col = 0; col < t->columns; col++) {
        char *sep = strchr(rest, SEP[0]);
        if (sep)
            *sep = '\0';
        char *cell = strdup(rest);
        if (!cell)
            cli_out_of_memory();
        for (char *p = cell; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                *p = '?';
        t->cells[t->rows * t->columns + col] = cell;
        rest = sep ? sep + 1 : rest + strlen(rest);
    }
    t->rows++;
}

void table_print_free(cli_table *t)
{
    size_t width[CLI_TABLE_COLUMNS_MAX] = {0};
    for (size_t col = 0; col < t->columns; col++) {
        width[col] = strlen(t->titles[col]);
        for (size_t r = 0; r < t->rows; r++) {
            size_t len = strlen(t->cells[r * t->columns + col]);
            width[col] = len > width[col] ? len : width[col];
        }
    }
    for (size_t r = 0; r <= t->rows; r++) {
        for (size_t col = 0; col < t->columns; col++) {
            const char *cell = r == 0 ? t->titles[col] : t->cells[(r - 1) * t->columns + col];
            bool last = col + 1 == t->columns;
            printf("%-*s%s", last ? 0 : (int)width[col], cell, last ? "\n" : "  ");
        }
    }
    for (size_t i = 0; i < t->rows * t->columns; i++)
        free(t->cells[i]);
    free(t->cells);
    t->cells = NULL;
}

/* Print o as one compact line and release it. */
void json_emit(json_t *o)
{
    if (!o)
        cli_out_of_memory();
    char *text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text)
        cli_out_of_memory();
    puts(text);
    free(text);
}

void time_text(int64_t ms, char out[40])
{
    if (ms)
        time_format(ms, out);
    else
        snprintf(out, 40, "-");
}

/* ---- listings read in pages ---- */

void *listing_begin(const cli *c, cli_listing *l, const cli_listing_kind *kind)
{
    l->page = calloc(kind->page_max, kind->entry_bytes);
    if (!l->page)
        cli_out_of_memory();
    l->page_max = kind->page_max;
    l->remaining = value_or(c, SLOT_LIMIT, CLI_LOG_LIMIT_DEFAULT);
    l->rc = TALLY_ok;
    table_init(&l->table, kind->titles, kind->columns);
    return l->page;
}

uint32_t listing_next(const cli_listing *l)
{
    return l->remaining < l->page_max ? (uint32_t)l->remaining : l->page_max;
}

void listing_took(cli_listing *l, size_t count)
{
    l->remaining -= count < l->remaining ? count : l->remaining;
}

void listing_end(const cli *c, cli_listing *l, bool show)
{
    free(l->page);
    if (!c->json && show)
        table_print_free(&l->table);
    else
        free(l->table.cells);
}

uint64_t listing_by_cursor(cli *c, cli_listing *l, uint64_t after, listing_read_fn read,
                           listing_show_fn show)
{
    uint64_t next = 0;
    for (uint32_t limit; (limit = listing_next(l)) > 0; after = next) {
        size_t count = 0;
        l->rc = read(c, after, limit, l->page, &count, &next);
        if (l->rc != TALLY_ok)
            break;
        show(c, &l->table, l->page, count);
        listing_took(l, count);
        if (next == 0 || count == 0)
            break;
    }
    listing_end(c, l, l->rc == TALLY_ok || l->table.rows > 0); /* shown also before a failure */
    return l->rc == TALLY_ok ? next : 0;
}

/* ---- failures ---- */

/* Tell a person what failed and, for a write, how to retry it. */
void explain_failure(const cli *c, const char *what, int code, bool write)
{
    if (code == TALLY_unreachable)
        fprintf(stderr, "tally: %s: cannot reach tallyd at %s (unreachable)\n", what, c->url);
    else if (is_transport_fault(code))
        fprintf(stderr, "tally: %s: %s (%s)\n", what,
                code == TALLY_timed_out ? "no answer in time" : "the server is busy or stopping",
                tally_strerror(code));
    else
        fprintf(stderr, "tally: %s %s: %s\n", what, write ? "rejected" : "failed",
                tally_strerror(code));
    if (write && is_transport_fault(code))
        fprintf(stderr, "tally: the write may or may not have been applied; repeat it with "
                        "--key %s to find out\n", c->key);
    if (code == TALLY_idempotency_key_reused)
        fprintf(stderr, "tally: consumer %s already used key %s for a different command\n",
                c->consumer, c->key);
}

/* Print a failed read and return the exit code. */
int read_failure(const cli *c, const char *what, int rc)
{
    if (c->json)
        json_emit(json_pack("{s:s}", "code", tally_strerror(rc)));
    else
        explain_failure(c, what, rc, false);
    return exit_code_of(rc);
}

/*
 * options.c — the option table's engine (options.h): the command line, the
 * config file, applying values, and the three printers (--help,
 * --print-config, the example config).
 */
#include "config.h"

#include "common/cli.h"
#include "common/options.h"
#include "common/file_mode.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define OPTION_VAL_FIRST 1000 /* getopt's val of row i is OPTION_VAL_FIRST + i */
#define HELP_COLUMN 26        /* where --help's text starts */
#define TEXT_WIDTH 79

bool options_init(options_set *s, const char *program, const options_row *rows, size_t count)
{
    memset(s, 0, sizeof(*s));
    s->program = program;
    s->rows = rows;
    s->row_count = count;
    s->command_line = calloc(count, sizeof(options_given));
    s->file = calloc(count, sizeof(options_given));
    return s->command_line && s->file;
}

void options_free(options_set *s)
{
    free(s->command_line);
    free(s->file);
    free(s->file_text);
    memset(s, 0, sizeof(*s));
}

static long row_index(const options_set *s, const char *name)
{
    for (size_t i = 0; i < s->row_count; i++)
        if (strcmp(s->rows[i].name, name) == 0)
            return (long)i;
    return -1;
}

const options_row *options_find(const options_set *s, const char *name)
{
    long i = row_index(s, name);
    return i < 0 ? NULL : &s->rows[i];
}

unsigned options_given_count(const options_set *s, const char *name, const char **last)
{
    long i = row_index(s, name);
    assert(i >= 0);
    const options_given *g = &s->command_line[i];
    if (last)
        *last = g->count ? g->values[g->count - 1].text : NULL;
    return g->count;
}

/* Record one value; a row that is not repeatable keeps its last one. */
static bool given_add(options_given *g, const options_row *row, const char *text, unsigned line)
{
    if (!(row->flags & OPTIONS_REPEATABLE))
        g->count = 0;
    if (g->count == OPTIONS_VALUES_MAX)
        return false;
    g->values[g->count++] = (options_value){text, line};
    return true;
}

/* getopt's string: ':' first (a missing value is told apart), then each
 * row's short option. */
static char *short_options(const options_set *s)
{
    char *text = malloc(2 * s->row_count + 2), *at = text;
    if (text == NULL)
        return NULL;
    *at++ = ':';
    for (size_t i = 0; i < s->row_count; i++) {
        if (s->rows[i].short_name == 0)
            continue;
        *at++ = s->rows[i].short_name;
        if (s->rows[i].arg)
            *at++ = ':';
    }
    *at = '\0';
    return text;
}

/* The row of getopt's answer c, or -1. */
static long row_of_option(const options_set *s, int c)
{
    if (c >= OPTION_VAL_FIRST && (size_t)(c - OPTION_VAL_FIRST) < s->row_count)
        return c - OPTION_VAL_FIRST;
    for (size_t i = 0; c > 0 && i < s->row_count; i++)
        if (s->rows[i].short_name == c)
            return (long)i;
    return -1;
}

/* What is wrong with getopt's '?' or ':' (the option in argv[optind - 1],
 * or a short one in optopt). */
static int option_error(const options_set *s, int c, char **argv)
{
    char shown[3] = {'-', (char)optopt, '\0'};
    const char *option = optopt > 0 && optopt < OPTION_VAL_FIRST ? shown : argv[optind - 1];
    if (c == ':')
        return options_usage_error(s, "%s: a value is missing", option);
    if (optopt >= OPTION_VAL_FIRST) /* a known flag, given "--flag=value" */
        return options_usage_error(s, "--%s takes no value: %s",
                                   s->rows[optopt - OPTION_VAL_FIRST].name, option);
    return options_usage_error(s, "unknown option: %s", option);
}

int options_parse_command_line(options_set *s, int argc, char **argv)
{
    struct option *opts = calloc(s->row_count + 1, sizeof(*opts));
    char *shorts = short_options(s);
    if (opts == NULL || shorts == NULL) {
        free(opts);
        free(shorts);
        fprintf(stderr, "%s: out of memory\n", s->program);
        return 1;
    }
    for (size_t i = 0; i < s->row_count; i++)
        opts[i] = (struct option){s->rows[i].name,
                                  s->rows[i].arg ? required_argument : no_argument, NULL,
                                  OPTION_VAL_FIRST + (int)i};
    int c, rc = 0;
    opterr = 0; /* option_error says it, with the program's name */
    optind = 0; /* glibc: start over at argv[1], whatever was parsed before */
    while (rc == 0 && (c = getopt_long(argc, argv, shorts, opts, NULL)) != -1) {
        long i = row_of_option(s, c);
        if (i < 0)
            rc = option_error(s, c, argv);
        else if (!given_add(&s->command_line[i], &s->rows[i], optarg, ++s->command_line_count))
            rc = options_usage_error(s, "--%s: at most %d times", s->rows[i].name,
                                     OPTIONS_VALUES_MAX);
    }
    if (rc == 0 && (size_t)(argc - optind) > s->arguments_max)
        rc = options_usage_error(s, "unexpected argument: %s", argv[optind + s->arguments_max]);
    s->arguments = argv + optind;
    s->argument_count = rc == 0 ? (size_t)(argc - optind) : 0;
    free(opts);
    free(shorts);
    return rc;
}

int options_usage_error(const options_set *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", s->program);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", s->program);
    return 2;
}

int options_load_command_line(options_set *s, const char *program, const options_row *rows,
                              size_t count, int argc, char **argv, void *target,
                              options_usage_fn *usage)
{
    size_t arguments_max = s->arguments_max; /* options_init clears it */
    if (!options_init(s, program, rows, count)) {
        fprintf(stderr, "%s: out of memory\n", program);
        return 1;
    }
    s->arguments_max = arguments_max;
    int rc = options_parse_command_line(s, argc, argv);
    if (rc != 0)
        return rc;
    if (options_given_count(s, "help", NULL)) {
        usage(s, stdout);
        return 0;
    }
    if (options_find(s, "version") && options_given_count(s, "version", NULL)) {
        printf("%s %s\n", s->program, PACKAGE_VERSION);
        return 0;
    }
    char why[OPTIONS_WHY_BYTES_MAX];
    rc = options_apply(s, target, why, sizeof(why));
    if (rc == 2)
        return options_usage_error(s, "%s", why);
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", s->program, why);
    return rc != 0 ? rc : -1;
}

/* ---- the file ---- */

char *options_trim(char *text)
{
    while (isspace((unsigned char)*text))
        text++;
    char *end = text + strlen(text);
    while (end > text && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return text;
}

static char *file_slurp(const char *path, char *why, size_t why_size)
{
    size_t len = 0;
    char *text = file_read_bounded(path, NULL, OPTIONS_FILE_BYTES_MAX, &len, why, why_size);
    if (text != NULL && memchr(text, '\0', len) != NULL) {
        snprintf(why, why_size, "%s: not a text file (a NUL byte)", path);
        free(text);
        return NULL;
    }
    return text;
}

/* One line (comments already cut, trimmed, not empty): key = value. */
static bool file_line(options_set *s, char *line, unsigned number, char *why, size_t why_size)
{
    char *eq = strchr(line, '=');
    if (eq == NULL) {
        snprintf(why, why_size, "expected key = value, got: %.200s", line);
        return false;
    }
    *eq = '\0';
    const char *key = options_trim(line);
    char *value = options_trim(eq + 1);
    /* "value" or 'value': the quotes are not part of it (a quote inside,
     * or one not closed, is refused: say what was meant) */
    size_t vlen = strlen(value);
    if (vlen > 0 && (value[0] == '"' || value[0] == '\'')) {
        char q = value[0];
        if (vlen < 2 || value[vlen - 1] != q || memchr(value + 1, q, vlen - 2)) {
            snprintf(why, why_size, "%.200s: a quoted value is one quote, the value, the same quote "
                     "(and no '#': that starts a comment)", key);
            return false;
        }
        value[vlen - 1] = '\0';
        value++;
    }
    long i = row_index(s, key);
    if (i < 0 || (s->rows[i].flags & OPTIONS_COMMAND_LINE) || s->rows[i].arg == NULL) {
        snprintf(why, why_size, "unknown key '%.200s'", key);
        return false;
    }
    options_given *g = &s->file[i];
    if (!(s->rows[i].flags & OPTIONS_REPEATABLE) && g->count) {
        snprintf(why, why_size, "%.200s: given twice (first on line %u)", key, g->values[0].line);
        return false;
    }
    if (!given_add(g, &s->rows[i], value, number)) {
        snprintf(why, why_size, "%.200s: at most %d times", key, OPTIONS_VALUES_MAX);
        return false;
    }
    return true;
}

int options_read_file(options_set *s, const char *path, char *why, size_t why_size)
{
    assert(s->file_text == NULL);
    s->file_text = file_slurp(path, why, why_size);
    if (s->file_text == NULL)
        return 2;
    s->file_path = path;
    char inner[OPTIONS_WHY_BYTES_MAX] = "";
    unsigned number = 0;
    for (char *next = s->file_text, *line; next;) {
        line = next;
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        number++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        line = options_trim(line);
        bool ok = strlen(line) < OPTIONS_LINE_BYTES_MAX;
        if (!ok)
            snprintf(inner, sizeof(inner), "a line longer than %d bytes", OPTIONS_LINE_BYTES_MAX);
        if (ok && *line != '\0')
            ok = file_line(s, line, number, inner, sizeof(inner));
        if (!ok) {
            snprintf(why, why_size, "%s:%u: %s", path, number, inner);
            return 2;
        }
    }
    return 0;
}

/* ---- applying ---- */

/* The values in effect for row i: the command line's, else the file's. */
static const options_given *effective(const options_set *s, size_t i)
{
    return s->command_line[i].count ? &s->command_line[i] : &s->file[i];
}

static bool is_setting(const options_row *row)
{
    return row->arg != NULL && row->parse != NULL && !(row->flags & OPTIONS_COMMAND_LINE);
}

/* Apply row i's values g (or its default when g has none). */
static int apply_row(const options_set *s, size_t i, const options_given *g, void *target,
                     char *why, size_t why_size)
{
    const options_row *row = &s->rows[i];
    char inner[OPTIONS_WHY_BYTES_MAX];
    if (g->count == 0 && row->value_default) {
        inner[0] = '\0';
        int rc = row->parse(row, target, row->value_default, inner, sizeof(inner));
        assert(rc == 0); /* a default the table cannot parse is a bug */
    }
    for (unsigned v = 0; v < g->count; v++) {
        inner[0] = '\0';
        const char *text = g->values[v].text ? g->values[v].text : "";
        int rc = row->parse(row, target, text, inner, sizeof(inner));
        if (rc == 0)
            continue;
        if (g == &s->file[i])
            snprintf(why, why_size, "%s:%u: %s: %s", s->file_path, g->values[v].line, row->name,
                     inner);
        else
            snprintf(why, why_size, "--%s: %s", row->name, inner);
        return rc;
    }
    return 0;
}

/* The command line's value that came place-th (1, 2, ...) of a row that is
 * not a setting, as row i and the values from it (one); false if none
 * (not such a row's, or replaced by a later one). */
static bool value_at(const options_set *s, unsigned place, size_t *row_out, options_given *one)
{
    for (size_t i = 0; i < s->row_count; i++) {
        if (is_setting(&s->rows[i]) || s->rows[i].parse == NULL)
            continue;
        const options_given *g = &s->command_line[i];
        for (unsigned v = 0; v < g->count; v++)
            if (g->values[v].line == place) {
                *row_out = i;
                one->values[0] = g->values[v];
                one->count = 1;
                return true;
            }
    }
    return false;
}

int options_apply(const options_set *s, void *target, char *why, size_t why_size)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < s->row_count; i++)
        if (is_setting(&s->rows[i]))
            rc = apply_row(s, i, effective(s, i), target, why, why_size);
    static const options_given none;
    for (size_t i = 0; rc == 0 && i < s->row_count; i++)
        if (!is_setting(&s->rows[i]) && s->rows[i].parse != NULL)
            rc = apply_row(s, i, &none, target, why, why_size);
    options_given one;
    size_t row;
    for (unsigned place = 1; rc == 0 && place <= s->command_line_count; place++)
        if (value_at(s, place, &row, &one))
            rc = apply_row(s, row, &one, target, why, why_size);
    return rc;
}

int options_parse_number(const options_row *row, void *target, const char *text, char *why,
                         size_t why_size)
{
    assert(row->max > 0 && row->scale > 0);
    assert(row->store == OPTIONS_STORE_UNSIGNED || row->store == OPTIONS_STORE_U64 ||
           row->store == OPTIONS_STORE_I64);
    assert(row->max <= (row->store == OPTIONS_STORE_UNSIGNED ? UINT32_MAX
                        : row->store == OPTIONS_STORE_U64    ? UINT64_MAX
                                                             : INT64_MAX) /
                           row->scale);
    uint64_t v;
    if (!cli_parse_u64(text, row->min, row->max, &v)) {
        snprintf(why, why_size, "not a %s in range %" PRIu64 "..%" PRIu64 ": %.100s",
                 row->noun ? row->noun : "number", row->min, row->max, text);
        return 2;
    }
    char *field = (char *)target + row->offset;
    v *= row->scale;
    switch (row->store) {
    case OPTIONS_STORE_UNSIGNED: *(unsigned *)(void *)field = (unsigned)v; break;
    case OPTIONS_STORE_U64: *(uint64_t *)(void *)field = v; break;
    case OPTIONS_STORE_I64: *(int64_t *)(void *)field = (int64_t)v; break;
    default: break;
    }
    return 0;
}

int options_parse_text(const options_row *row, void *target, const char *text, char *why,
                       size_t why_size)
{
    (void)why, (void)why_size;
    assert(row->store == OPTIONS_STORE_TEXT);
    *(const char **)(void *)((char *)target + row->offset) = text;
    return 0;
}

int options_parse_flag(const options_row *row, void *target, const char *text, char *why,
                       size_t why_size)
{
    (void)text, (void)why, (void)why_size;
    assert(row->store == OPTIONS_STORE_BOOL);
    *(bool *)(void *)((char *)target + row->offset) = true;
    return 0;
}

/* ---- the printers ---- */

/* The row's help with its range and default: "text, LO..HI (default D)". */
static void help_text(const options_row *row, char *out, size_t size)
{
    int n = snprintf(out, size, "%s", row->help);
    if (row->max > 0 && n >= 0 && (size_t)n < size)
        n += snprintf(out + n, size - (size_t)n, ", %" PRIu64 "..%" PRIu64, row->min, row->max);
    if (row->value_default && n >= 0 && (size_t)n < size)
        snprintf(out + n, size - (size_t)n, " (default %s)", row->value_default);
}

/* Print text wrapped at TEXT_WIDTH, each line after `prefix`; the first
 * line starts at column `column` already reached. */
static void wrap(FILE *f, const char *text, const char *prefix, size_t column)
{
    size_t indent = strlen(prefix), at = column;
    while (*text) {
        while (*text == ' ')
            text++;
        size_t word = strcspn(text, " ");
        if (word == 0)
            break;
        if (at > indent && at + 1 + word > TEXT_WIDTH) {
            fprintf(f, "\n%s", prefix);
            at = indent;
        } else if (at > indent) {
            fputc(' ', f);
            at++;
        }
        fwrite(text, 1, word, f);
        at += word;
        text += word;
    }
    fputc('\n', f);
}

void options_print_help(const options_set *s, FILE *f)
{
    char text[2048], head[128];
    char pad[HELP_COLUMN + 1];
    memset(pad, ' ', HELP_COLUMN);
    pad[HELP_COLUMN] = '\0';
    for (size_t i = 0; i < s->row_count; i++) {
        const options_row *row = &s->rows[i];
        char short_head[8] = "";
        if (row->short_name)
            snprintf(short_head, sizeof(short_head), "-%c, ", row->short_name);
        int n = snprintf(head, sizeof(head), "  %s--%s%s%s", short_head, row->name,
                         row->arg ? " " : "", row->arg ? row->arg : "");
        help_text(row, text, sizeof(text));
        if (row->flags & OPTIONS_REPEATABLE)
            snprintf(text + strlen(text), sizeof(text) - strlen(text), "; repeatable");
        if (n + 2 > HELP_COLUMN) {
            fprintf(f, "%s\n%s", head, pad);
        } else {
            fprintf(f, "%-*s", HELP_COLUMN, head);
        }
        wrap(f, text, pad, HELP_COLUMN);
    }
}

void options_print_config(const options_set *s, FILE *f)
{
    /* The same header whatever was read, so that printing what was
     * printed gives the same text. */
    fprintf(f, "# %s --print-config: the configuration in effect (the config file, the "
               "command line, the defaults)\n",
            s->program);
    for (size_t i = 0; i < s->row_count; i++) {
        const options_row *row = &s->rows[i];
        if (!is_setting(row))
            continue;
        const options_given *g = effective(s, i);
        for (unsigned v = 0; v < g->count; v++)
            fprintf(f, "%s = %s\n", row->name, g->values[v].text);
        if (g->count == 0 && row->value_default)
            fprintf(f, "%s = %s\n", row->name, row->value_default);
        else if (g->count == 0)
            fprintf(f, "# %s is not set\n", row->name);
    }
}

void options_print_example(const options_set *s, FILE *f)
{
    char text[2048];
    fprintf(f, "# %s's configuration: `key = value` lines; a key is a long option of\n"
               "# `%s --help` without the \"--\". Every key is shown commented out with\n"
               "# its default; a flag on the command line wins over the file.\n"
               "# Generated by `%s --example-config`: do not edit the shipped copy.\n",
            s->program, s->program, s->program);
    for (size_t i = 0; i < s->row_count; i++) {
        const options_row *row = &s->rows[i];
        if (!is_setting(row))
            continue;
        help_text(row, text, sizeof(text));
        if (row->flags & OPTIONS_REPEATABLE)
            snprintf(text + strlen(text), sizeof(text) - strlen(text),
                     ". Repeatable: one line per value");
        fputs("\n# ", f);
        wrap(f, text, "# ", 2);
        fprintf(f, "#%s = %s\n", row->name, row->value_default ? row->value_default : row->arg);
    }
}

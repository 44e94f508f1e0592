/*
 * doc_requests.c — the notation and hex lines of docs/PROTOCOL.md as bytes
 * (see doc_requests.h). A small recursive-descent parser: each value is
 * encoded as it is read; a map or array is encoded into a buffer of its own
 * first, since its msgpack header needs the entry count.
 */
#include "tests/support/doc_requests.h"

#include <ctype.h>
#include <errno.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DOC_FILE_BYTES_MAX (1u << 20)
#define NESTING_MAX 64
#define TABLE_HEADER "| # | bad input | request | code | message | stored |"
#define SETUP_FENCE "```bad-input-setup\n"

void doc_bytes_free(doc_bytes *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

static void bytes_append(doc_bytes *b, const void *p, size_t n)
{
    if (b->failed)
        return;
    if (n > DOC_REQUEST_BYTES_MAX - b->len) {
        b->failed = true;
        return;
    }
    if (b->len + n > b->capacity) {
        size_t cap = b->capacity ? b->capacity : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *data = realloc(b->data, cap);
        if (data == NULL) {
            b->failed = true;
            return;
        }
        b->data = data;
        b->capacity = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

static int bytes_write(void *data, const char *buf, size_t len)
{
    doc_bytes *b = data;
    bytes_append(b, buf, len);
    return b->failed ? -1 : 0;
}

char *doc_read(const char *name)
{
    const char *docs = getenv("TALLY_DOCS");
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", docs && *docs ? docs : "docs", name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *text = malloc(DOC_FILE_BYTES_MAX + 1);
    size_t n = text ? fread(text, 1, DOC_FILE_BYTES_MAX, f) : 0;
    fclose(f);
    if (text)
        text[n] = '\0';
    return text;
}

/* ---- hex ---- */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

long doc_hex_parse(const char *line, uint8_t *out, bool *wildcard, size_t capacity)
{
    size_t n = 0;
    for (const char *p = line; *p && *p != '\n' && *p != ')';) {
        if (*p == ' ') {
            p++;
            continue;
        }
        if (n == capacity)
            return -1;
        bool wild = p[0] == '.' && p[1] == '.';
        int hi = hex_digit(p[0]), lo = hi < 0 ? -1 : hex_digit(p[1]);
        if (!wild && lo < 0)
            return -1;
        if (wildcard)
            wildcard[n] = wild;
        out[n++] = wild ? 0 : (uint8_t)(hi << 4 | lo);
        p += 2;
    }
    return (long)n;
}

/* ---- the notation ---- */

typedef struct parser {
    const char *p;
    int depth;
    char *err;
    size_t err_size;
    bool failed;
} parser;

static void parse_fail(parser *ps, const char *fmt, ...)
{
    if (ps->failed)
        return;
    ps->failed = true;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(ps->err, ps->err_size, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < ps->err_size)
        snprintf(ps->err + n, ps->err_size - (size_t)n, " (at \"%.24s\")", ps->p);
}

static void skip_space(parser *ps)
{
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n')
        ps->p++;
}

static bool take(parser *ps, const char *token)
{
    skip_space(ps);
    size_t n = strlen(token);
    if (strncmp(ps->p, token, n) != 0)
        return false;
    ps->p += n;
    return true;
}

static void expect(parser *ps, const char *token)
{
    if (!take(ps, token))
        parse_fail(ps, "expected '%s'", token);
}

/* A count after "*" or in repeat(N, ...): 0..DOC_REQUEST_BYTES_MAX. */
static size_t parse_count(parser *ps)
{
    skip_space(ps);
    errno = 0;
    char *end;
    unsigned long long n = strtoull(ps->p, &end, 10);
    if (end == ps->p || errno != 0 || n > DOC_REQUEST_BYTES_MAX) {
        parse_fail(ps, "bad count");
        return 0;
    }
    ps->p = end;
    return (size_t)n;
}

/* Optional "*N" after a str or bin; 1 when absent. */
static size_t parse_repeat_suffix(parser *ps)
{
    return take(ps, "*") ? parse_count(ps) : 1;
}

/* The bytes of "(hex)" into b. */
static void parse_hex_group(parser *ps, doc_bytes *b)
{
    expect(ps, "(");
    const char *close = strchr(ps->p, ')');
    if (ps->failed || close == NULL) {
        parse_fail(ps, "unclosed '('");
        return;
    }
    static uint8_t buf[DOC_HEX_BYTES_MAX];
    long n = doc_hex_parse(ps->p, buf, NULL, sizeof(buf));
    if (n < 0) {
        parse_fail(ps, "bad hex");
        return;
    }
    bytes_append(b, buf, (size_t)n);
    ps->p = close + 1;
}

static void pack_repeated(doc_bytes *out, bool bin, const doc_bytes *unit, size_t times)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, bytes_write);
    if (unit->len && times > DOC_REQUEST_BYTES_MAX / unit->len) {
        out->failed = true;
        return;
    }
    size_t total = unit->len * times;
    if (bin ? msgpack_pack_bin(&pk, total) : msgpack_pack_str(&pk, total))
        return;
    for (size_t i = 0; i < times && !out->failed; i++)
        bytes_append(out, unit->data, unit->len);
}

static void parse_string(parser *ps, doc_bytes *out)
{
    doc_bytes unit = {0};
    ps->p++; /* the opening quote */
    while (*ps->p && *ps->p != '"') {
        if (*ps->p == '\\' && ps->p[1])
            ps->p++;
        bytes_append(&unit, ps->p++, 1);
    }
    if (*ps->p != '"')
        parse_fail(ps, "unterminated string");
    else
        ps->p++;
    pack_repeated(out, false, &unit, parse_repeat_suffix(ps));
    doc_bytes_free(&unit);
}

static void parse_number(parser *ps, doc_bytes *out)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, bytes_write);
    const char *start = ps->p;
    const char *q = start + (*start == '-');
    while (isdigit((unsigned char)*q))
        q++;
    char *end;
    errno = 0;
    if (*q == '.') {
        double d = strtod(start, &end);
        msgpack_pack_double(&pk, d);
    } else if (*start == '-') {
        long long v = strtoll(start, &end, 10);
        msgpack_pack_int64(&pk, v);
    } else {
        unsigned long long v = strtoull(start, &end, 10);
        msgpack_pack_uint64(&pk, v);
    }
    if (end == start || errno != 0)
        parse_fail(ps, "bad number");
    ps->p = end;
}

static void parse_value(parser *ps, doc_bytes *out);

/* Elements of a map ("}" closes, entries are key: value) or an array. */
static void parse_container(parser *ps, doc_bytes *out, bool map)
{
    const char *close = map ? "}" : "]";
    doc_bytes body = {0};
    size_t count = 0;
    if (++ps->depth > NESTING_MAX)
        parse_fail(ps, "nested too deep");
    if (!take(ps, close)) {
        do {
            if (!map && take(ps, "repeat(")) {
                size_t times = parse_count(ps);
                expect(ps, ",");
                doc_bytes one = {0};
                parse_value(ps, &one);
                expect(ps, ")");
                for (size_t i = 0; i < times && !ps->failed && !body.failed; i++)
                    bytes_append(&body, one.data, one.len);
                count += times;
                doc_bytes_free(&one);
                continue;
            }
            parse_value(ps, &body);
            if (map) {
                expect(ps, ":");
                parse_value(ps, &body);
            }
            count++;
        } while (!ps->failed && take(ps, ","));
        expect(ps, close);
    }
    ps->depth--;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, bytes_write);
    if (count > UINT32_MAX)
        parse_fail(ps, "too many elements");
    else if (map)
        msgpack_pack_map(&pk, count);
    else
        msgpack_pack_array(&pk, count);
    bytes_append(out, body.data, body.len);
    out->failed |= body.failed;
    doc_bytes_free(&body);
}

static void parse_value(parser *ps, doc_bytes *out)
{
    skip_space(ps);
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, bytes_write);
    char c = *ps->p;
    if (ps->failed)
        return;
    if (c == '{' || c == '[') {
        ps->p++;
        parse_container(ps, out, c == '{');
    } else if (c == '"') {
        parse_string(ps, out);
    } else if (c == '-' || isdigit((unsigned char)c)) {
        parse_number(ps, out);
    } else if (take(ps, "nil")) {
        msgpack_pack_nil(&pk);
    } else if (take(ps, "true")) {
        msgpack_pack_true(&pk);
    } else if (take(ps, "false")) {
        msgpack_pack_false(&pk);
    } else if (take(ps, "raw")) {
        parse_hex_group(ps, out);
    } else if (take(ps, "bin")) {
        doc_bytes unit = {0};
        parse_hex_group(ps, &unit);
        pack_repeated(out, true, &unit, parse_repeat_suffix(ps));
        doc_bytes_free(&unit);
    } else {
        parse_fail(ps, "expected a value");
    }
}

int doc_request_build(const char *text, doc_bytes *out, char *err, size_t err_size)
{
    memset(out, 0, sizeof(*out));
    parser ps = {.p = text, .err = err, .err_size = err_size};
    skip_space(&ps);
    if (*ps.p == '\0')
        parse_fail(&ps, "empty request");
    while (!ps.failed && *ps.p) {
        parse_value(&ps, out);
        skip_space(&ps);
    }
    if (out->failed)
        parse_fail(&ps, "request too large or out of memory");
    if (!ps.failed && out->data == NULL && (out->data = malloc(1)) != NULL)
        out->capacity = 1; /* raw(): an empty message, still a valid pointer */
    return ps.failed ? -1 : 0;
}

/* ---- the doc's blocks and table ---- */

bool doc_example_next(const char **cursor, doc_example *out, bool *bad)
{
    static const char fence[] = "```example\n";
    *bad = false;
    const char *block = strstr(*cursor, fence);
    if (block == NULL)
        return false;
    block += strlen(fence);
    const char *reply = strchr(block, '\n');
    if (block[0] != '>' || block[1] != ' ' || reply == NULL || reply[1] != '<' ||
        reply[2] != ' ') {
        *bad = true;
        return false;
    }
    out->request_hex = block + 2;
    out->reply_hex = reply + 3;
    *cursor = reply + 1;
    return true;
}

/* A copy of [start, end) without surrounding spaces and backticks. */
static char *cell_copy(const char *start, const char *end)
{
    while (start < end && (*start == ' ' || *start == '`'))
        start++;
    while (end > start && (end[-1] == ' ' || end[-1] == '`'))
        end--;
    char *s = malloc((size_t)(end - start) + 1);
    if (s) {
        memcpy(s, start, (size_t)(end - start));
        s[end - start] = '\0';
    }
    return s;
}

#define ROW_CELLS 6

/* Split "| a | b | ... |" into ROW_CELLS cells; false if the shape differs. */
static bool row_split(const char *line, const char *end, char *cells[ROW_CELLS])
{
    if (*line != '|')
        return false;
    const char *p = line + 1;
    for (int i = 0; i < ROW_CELLS; i++) {
        const char *bar = memchr(p, '|', (size_t)(end - p));
        if (bar == NULL)
            return false;
        cells[i] = cell_copy(p, bar);
        p = bar + 1;
    }
    while (p < end && *p == ' ')
        p++;
    return p == end;
}

static int row_parse(const char *line, const char *end, doc_bad_input_row *row, char *err,
                     size_t err_size)
{
    char *cells[ROW_CELLS] = {0};
    bool shaped = row_split(line, end, cells);
    char *stop = NULL;
    unsigned long number = shaped ? strtoul(cells[0], &stop, 10) : 0;
    int rc = 0;
    if (!shaped || stop == cells[0] || *stop != '\0' ||
        (strcmp(cells[5], "yes") != 0 && strcmp(cells[5], "no") != 0)) {
        snprintf(err, err_size, "bad table row: %.*s", (int)(end - line), line);
        rc = -1;
    } else {
        row->number = (unsigned)number;
        row->what = cells[1];
        row->request = cells[2];
        row->code = cells[3];
        bool write_result = strcmp(cells[4], "—") == 0;
        bool empty = strcmp(cells[4], "\"\"") == 0;
        row->message = write_result ? NULL : empty ? strdup("") : cells[4];
        if (write_result || empty)
            free(cells[4]);
        row->stored = strcmp(cells[5], "yes") == 0;
        free(cells[0]);
        free(cells[5]);
        return 0;
    }
    for (int i = 0; i < ROW_CELLS; i++)
        free(cells[i]);
    return rc;
}

static int setup_parse(const char *doc, doc_bad_input_table *out, char *err, size_t err_size)
{
    const char *block = strstr(doc, SETUP_FENCE);
    const char *end = block ? strstr(block + strlen(SETUP_FENCE), "```") : NULL;
    if (end == NULL) {
        snprintf(err, err_size, "no ```bad-input-setup block");
        return -1;
    }
    for (const char *p = block + strlen(SETUP_FENCE); p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        nl = nl ? nl : end;
        if (nl > p) {
            char **grown = realloc(out->setup, (out->setup_count + 1) * sizeof(*grown));
            if (grown == NULL)
                return -1;
            out->setup = grown;
            out->setup[out->setup_count++] = cell_copy(p, nl);
        }
        p = nl + 1;
    }
    return 0;
}

int doc_bad_input_parse(const char *doc, doc_bad_input_table *out, char *err, size_t err_size)
{
    memset(out, 0, sizeof(*out));
    const char *header = strstr(doc, TABLE_HEADER "\n");
    if (header == NULL) {
        snprintf(err, err_size, "no bad-input table (header \"%s\")", TABLE_HEADER);
        return -1;
    }
    const char *line = strchr(header, '\n') + 1;
    line = strchr(line, '\n'); /* the |---| line */
    for (line = line ? line + 1 : ""; *line == '|';) {
        const char *end = strchr(line, '\n');
        end = end ? end : line + strlen(line);
        doc_bad_input_row *grown = realloc(out->rows, (out->count + 1) * sizeof(*grown));
        if (grown == NULL)
            return -1;
        out->rows = grown;
        if (row_parse(line, end, &out->rows[out->count], err, err_size) != 0)
            return -1;
        out->count++;
        line = *end ? end + 1 : end;
    }
    return setup_parse(doc, out, err, err_size);
}

void doc_bad_input_free(doc_bad_input_table *t)
{
    for (size_t i = 0; i < t->count; i++) {
        free(t->rows[i].what);
        free(t->rows[i].request);
        free(t->rows[i].code);
        free(t->rows[i].message);
    }
    for (size_t i = 0; i < t->setup_count; i++)
        free(t->setup[i]);
    free(t->rows);
    free(t->setup);
    memset(t, 0, sizeof(*t));
}

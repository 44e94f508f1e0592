/*
 * auth.c — the auth file's parser and the token and grant checks (see
 * auth.h). The parser is strict: any line it does not understand stops
 * the whole file with the file name and line number, since a half-read
 * table would silently refuse (or allow) someone.
 */
#include "net/auth/auth.h"

#include "common/error.h"
#include "common/file_mode.h"
#include "common/sha256.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct auth_principal {
    char name[AUTH_NAME_BYTES_MAX + 1];
    uint8_t hash[SHA256_BYTES];
    bool read, admin;
    unsigned write_count, subscribe_count;
    char write[AUTH_GLOBS_MAX][AUTH_GLOB_BYTES_MAX + 1];
    char subscribe[AUTH_GLOBS_MAX][AUTH_GLOB_BYTES_MAX + 1];
};

struct auth_table {
    auth_principal *principals;
    size_t count, capacity;
};

const char *auth_class_name(auth_class c)
{
    switch (c) {
    case AUTH_CLASS_NONE: return "none";
    case AUTH_CLASS_READ: return "read";
    case AUTH_CLASS_WRITE: return "write";
    case AUTH_CLASS_SUBSCRIBE: return "subscribe";
    case AUTH_CLASS_ADMIN: return "admin";
    }
    return "?";
}

/* ---- parsing ---- */

typedef struct parser {
    const char *file;
    unsigned line;
    char *why;
    size_t why_size;
} parser;

__attribute__((format(printf, 2, 3))) static int parse_fail(parser *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    file_line_message(p->why, p->why_size, p->file, p->line, fmt, ap);
    va_end(ap);
    return TALLY_invalid_argument;
}

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

/* A glob byte: printable ASCII but space, comma and '#'. */
static bool glob_char(char c) { return c > ' ' && c < 127 && c != ',' && c != '#'; }

static int parse_name(parser *p, tally_str s, auth_principal *out)
{
    if (s.len > AUTH_NAME_BYTES_MAX)
        return parse_fail(p, "principal name longer than %d bytes", AUTH_NAME_BYTES_MAX);
    for (size_t i = 0; i < s.len; i++)
        if (!name_char(s.ptr[i]))
            return parse_fail(p, "principal name %.*s: only A-Z a-z 0-9 . _ - allowed",
                              (int)s.len, s.ptr);
    memcpy(out->name, s.ptr, s.len);
    out->name[s.len] = '\0';
    return TALLY_ok;
}

static int parse_hash(parser *p, tally_str s, auth_principal *out)
{
    if (s.len != 2 * SHA256_BYTES)
        return parse_fail(p, "the token hash is %d hex digits (SHA-256), got %zu characters",
                          2 * SHA256_BYTES, s.len);
    for (size_t i = 0; i < SHA256_BYTES; i++) {
        int hi = bytes_hex_value(s.ptr[2 * i]), lo = bytes_hex_value(s.ptr[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return parse_fail(p, "the token hash is not hex (character %zu)", 2 * i + (hi < 0 ? 1 : 2));
        out->hash[i] = (uint8_t)(hi << 4 | lo);
    }
    return TALLY_ok;
}

/* A write: or subscribe: glob into list (count entries so far). */
static int parse_glob(parser *p, const char *kind, tally_str g, char list[][AUTH_GLOB_BYTES_MAX + 1],
                      unsigned *count)
{
    if (g.len == 0 || g.len > AUTH_GLOB_BYTES_MAX)
        return parse_fail(p, "%s: needs a name or glob of 1-%d bytes", kind, AUTH_GLOB_BYTES_MAX);
    for (size_t i = 0; i < g.len; i++)
        if (!glob_char(g.ptr[i]))
            return parse_fail(p, "%s%.*s: a glob is printable ASCII without spaces, ',' or '#'",
                              kind, (int)g.len, g.ptr);
    for (unsigned i = 0; i < *count; i++)
        if (tally_str_equal(tally_str_from(list[i]), g))
            return parse_fail(p, "grant %s%.*s given twice", kind, (int)g.len, g.ptr);
    if (*count == AUTH_GLOBS_MAX)
        return parse_fail(p, "more than %d %s grants", AUTH_GLOBS_MAX, kind);
    memcpy(list[*count], g.ptr, g.len);
    list[(*count)++][g.len] = '\0';
    return TALLY_ok;
}

static bool has_prefix(tally_str s, const char *prefix, tally_str *rest)
{
    size_t n = strlen(prefix);
    if (s.len < n || memcmp(s.ptr, prefix, n) != 0)
        return false;
    *rest = (tally_str){s.ptr + n, s.len - n};
    return true;
}

static int parse_grant(parser *p, tally_str g, auth_principal *out)
{
    tally_str rest;
    bool *flag = tally_str_equal(g, tally_str_from("read"))    ? &out->read
                 : tally_str_equal(g, tally_str_from("admin")) ? &out->admin
                                                               : NULL;
    if (flag) {
        if (*flag)
            return parse_fail(p, "grant %.*s given twice", (int)g.len, g.ptr);
        *flag = true;
        return TALLY_ok;
    }
    if (has_prefix(g, "write:", &rest))
        return parse_glob(p, "write:", rest, out->write, &out->write_count);
    if (has_prefix(g, "subscribe:", &rest))
        return parse_glob(p, "subscribe:", rest, out->subscribe, &out->subscribe_count);
    if (g.len == 0)
        return parse_fail(p, "an empty grant (two commas, or a comma at an end)");
    return parse_fail(p, "unknown grant %.*s (read, write:<consumer>, subscribe:<name>, admin)",
                      (int)(g.len > 64 ? 64 : g.len), g.ptr);
}

static int parse_grants(parser *p, tally_str s, auth_principal *out)
{
    size_t start = 0;
    for (size_t i = 0; i <= s.len; i++) {
        if (i < s.len && s.ptr[i] != ',')
            continue;
        int rc = parse_grant(p, (tally_str){s.ptr + start, i - start}, out);
        if (rc != TALLY_ok)
            return rc;
        start = i + 1;
    }
    return TALLY_ok;
}

static bool blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* Split a line (comment removed) into at most 4 blank-separated fields;
 * returns how many there are (4: too many). */
static unsigned split_fields(tally_str line, tally_str f[4])
{
    unsigned n = 0;
    size_t i = 0;
    while (n < 4) {
        while (i < line.len && blank(line.ptr[i]))
            i++;
        if (i == line.len)
            break;
        size_t start = i;
        while (i < line.len && !blank(line.ptr[i]))
            i++;
        f[n++] = (tally_str){line.ptr + start, i - start};
    }
    return n;
}

static int table_add(parser *p, auth_table *t, const auth_principal *a)
{
    for (size_t i = 0; i < t->count; i++) {
        if (strcmp(t->principals[i].name, a->name) == 0)
            return parse_fail(p, "principal %s is listed twice", a->name);
        if (memcmp(t->principals[i].hash, a->hash, SHA256_BYTES) == 0)
            return parse_fail(p, "principal %s has the same token hash as %s", a->name,
                              t->principals[i].name);
    }
    if (t->count == AUTH_PRINCIPALS_MAX)
        return parse_fail(p, "more than %d principals", AUTH_PRINCIPALS_MAX);
    if (t->count == t->capacity) {
        size_t cap = t->capacity ? 2 * t->capacity : 8;
        auth_principal *grown = realloc(t->principals, cap * sizeof(*grown));
        if (grown == NULL)
            return TALLY_out_of_memory;
        t->principals = grown;
        t->capacity = cap;
    }
    t->principals[t->count++] = *a;
    return TALLY_ok;
}

static int parse_line(parser *p, tally_str line, auth_table *t)
{
    if (line.len > AUTH_LINE_BYTES_MAX)
        return parse_fail(p, "line longer than %d bytes", AUTH_LINE_BYTES_MAX);
    const char *hash_mark = memchr(line.ptr, '#', line.len);
    if (hash_mark)
        line.len = (size_t)(hash_mark - line.ptr);
    for (size_t i = 0; i < line.len; i++)
        if (line.ptr[i] == '\0')
            return parse_fail(p, "a NUL byte");
    tally_str f[4];
    unsigned n = split_fields(line, f);
    if (n == 0)
        return TALLY_ok;
    if (n != 3)
        return parse_fail(p, "expected NAME SHA256-HEX GRANTS, got %u field%s", n == 4 ? 4 : n,
                          n == 1 ? "" : n == 4 ? "s or more" : "s");
    auth_principal a;
    memset(&a, 0, sizeof(a));
    int rc = parse_name(p, f[0], &a);
    if (rc == TALLY_ok)
        rc = parse_hash(p, f[1], &a);
    if (rc == TALLY_ok)
        rc = parse_grants(p, f[2], &a);
    return rc == TALLY_ok ? table_add(p, t, &a) : rc;
}

int auth_table_parse(const char *text, size_t len, const char *file_name, auth_table **out,
                     char *why, size_t why_size)
{
    parser p = {file_name, 0, why, why_size};
    why[0] = '\0';
    if (len > AUTH_FILE_BYTES_MAX)
        return parse_fail(&p, "the file is larger than %d bytes", AUTH_FILE_BYTES_MAX);
    auth_table *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return TALLY_out_of_memory;
    int rc = TALLY_ok;
    size_t start = 0;
    while (rc == TALLY_ok && start < len) {
        const char *nl = memchr(text + start, '\n', len - start);
        size_t end = nl ? (size_t)(nl - text) : len;
        p.line++;
        rc = parse_line(&p, (tally_str){text + start, end - start}, t);
        start = end + 1;
    }
    if (rc == TALLY_ok && t->count == 0) {
        p.line = p.line ? p.line : 1;
        rc = parse_fail(&p, "no principal in the file (every request would be refused)");
    }
    if (rc != TALLY_ok) {
        auth_table_free(t);
        return rc;
    }
    *out = t;
    return TALLY_ok;
}

int auth_table_load(const char *path, auth_table **out, char *why, size_t why_size)
{
    if (!file_private_check(path, "auth file", why, why_size))
        return TALLY_invalid_argument;
    size_t len = 0;
    char *text = file_read_bounded(path, "auth file", AUTH_FILE_BYTES_MAX, &len, why, why_size);
    if (text == NULL)
        return TALLY_io_error;
    int rc = auth_table_parse(text, len, path, out, why, why_size);
    free(text);
    return rc;
}

void auth_table_free(auth_table *t)
{
    if (t == NULL)
        return;
    free(t->principals);
    free(t);
}

size_t auth_table_count(const auth_table *t) { return t->count; }

/* ---- checks ---- */

const auth_principal *auth_authenticate(const auth_table *t, const void *token, size_t len)
{
    if (len == 0 || len > AUTH_TOKEN_BYTES_MAX)
        return NULL;
    uint8_t h[SHA256_BYTES];
    sha256_digest(token, len, h);
    /* found: the index + 1 of the match (hashes are unique), 0 if none;
     * chosen by masks, not branches, over every principal */
    size_t found = 0;
    for (size_t i = 0; i < t->count; i++) {
        unsigned diff = 0;
        for (size_t j = 0; j < SHA256_BYTES; j++)
            diff |= (unsigned)(h[j] ^ t->principals[i].hash[j]);
        size_t equal_mask = (size_t)0 - (size_t)((diff - 1u) >> 31 & 1u); /* diff 0: all ones */
        found = (found & ~equal_mask) | ((i + 1) & equal_mask);
    }
    return found ? &t->principals[found - 1] : NULL;
}

bool auth_glob_match(const char *glob, tally_str name)
{
    size_t g = 0, n = 0, star = SIZE_MAX, resume = 0;
    size_t glen = strlen(glob);
    while (n < name.len) {
        if (g < glen && glob[g] == '*') {
            star = g++;
            resume = n;
        } else if (g < glen && glob[g] == name.ptr[n]) {
            g++;
            n++;
        } else if (star != SIZE_MAX) {
            g = star + 1;
            n = ++resume;
        } else {
            return false;
        }
    }
    while (g < glen && glob[g] == '*')
        g++;
    return g == glen;
}

static bool any_glob_matches(const char (*list)[AUTH_GLOB_BYTES_MAX + 1], unsigned count,
                             tally_str name)
{
    for (unsigned i = 0; i < count; i++)
        if (auth_glob_match(list[i], name))
            return true;
    return false;
}

bool auth_permits(const auth_principal *p, auth_class c, tally_str name)
{
    switch (c) {
    case AUTH_CLASS_NONE: return true;
    case AUTH_CLASS_READ: return p->read;
    case AUTH_CLASS_WRITE: return any_glob_matches(p->write, p->write_count, name);
    case AUTH_CLASS_SUBSCRIBE:
        return p->admin || any_glob_matches(p->subscribe, p->subscribe_count, name);
    case AUTH_CLASS_ADMIN: return p->admin;
    }
    return false;
}

const char *auth_principal_name(const auth_principal *p) { return p->name; }

/*
 * auth.h — principals and grants (tallyd --auth FILE, docs/SECURITY.md).
 *
 * The auth file lists principals, one a line: NAME, the SHA-256 of its
 * token in 64 hex digits, and its grants, comma-separated:
 *
 *   # NAME   SHA256-OF-TOKEN                                                   GRANTS
 *   billing  9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  write:billing,read
 *
 * A grant is `read` (the read ops), `write:<glob>` (writes whose consumer
 * matches), `subscribe:<glob>` (the subscriber ops of matching names) or
 * `admin` (backup, dead-letter replay and discard, subscriber deletion,
 * and every subscriber op); `*` in a glob matches any run of characters.
 * Every op's row in the op table names its class (auth_class).
 *
 * The parser (auth_table_parse) takes bytes, so a fuzz target feeds it
 * directly; the check (auth_authenticate, auth_permits) takes a parsed
 * table. A table is immutable once parsed: auth_guard.c swaps whole tables
 * on reload. The file holds hashes only; a token is hashed on arrival and
 * compared with every principal's hash in constant time.
 */
#ifndef TALLY_NET_AUTH_H
#define TALLY_NET_AUTH_H

#include "common/bytes.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What an op needs (a column of the op table). */
typedef enum auth_class {
    AUTH_CLASS_NONE,      /* anyone, no token needed (health) */
    AUTH_CLASS_READ,      /* `read` */
    AUTH_CLASS_WRITE,     /* `write:<glob>` matching the request's consumer */
    AUTH_CLASS_SUBSCRIBE, /* `subscribe:<glob>` matching the subscriber name, or `admin` */
    AUTH_CLASS_ADMIN,     /* `admin` */
} auth_class;

#define AUTH_TOKEN_BYTES_MAX 256      /* the `auth` field: 1..256 bytes */
#define AUTH_NAME_BYTES_MAX 64        /* a principal's name */
#define AUTH_GLOB_BYTES_MAX 64        /* a write or subscribe glob (names are <= 64 bytes) */
#define AUTH_GLOBS_MAX 16             /* write (or subscribe) grants of one principal */
#define AUTH_PRINCIPALS_MAX 4096      /* principals in a file */
#define AUTH_LINE_BYTES_MAX 4096      /* one line of the file */
#define AUTH_FILE_BYTES_MAX (1 << 20) /* the whole file */

typedef struct auth_table auth_table;
typedef struct auth_principal auth_principal;

/* The class's name in the reference and in log lines ("read", ...). */
const char *auth_class_name(auth_class c);

/* Parse len bytes of an auth file (file_name is only for messages).
 * TALLY_ok with *out (free with auth_table_free), TALLY_invalid_argument
 * with why = "FILE:LINE: what is wrong" (a bad line, an unknown grant, bad
 * hex, a duplicate name or hash, no principal at all), or
 * TALLY_out_of_memory. */
int auth_table_parse(const char *text, size_t len, const char *file_name, auth_table **out,
                     char *why, size_t why_size);
/* Read and parse path, which must be private (file_private_check). As
 * auth_table_parse, plus TALLY_io_error (cannot read; why says so). */
int auth_table_load(const char *path, auth_table **out, char *why, size_t why_size);
void auth_table_free(auth_table *t);
size_t auth_table_count(const auth_table *t);

/* The principal whose token hash equals SHA-256(token), or NULL (also for
 * an empty or over-long token). Every principal is compared, with no
 * early exit, so the time does not tell how close a guess was. The
 * principal lives as long as t. */
const auth_principal *auth_authenticate(const auth_table *t, const void *token, size_t len);
/* Whether p's grants allow an op of class c; name is the request's
 * consumer (WRITE) or subscriber name (SUBSCRIBE), ignored otherwise. */
bool auth_permits(const auth_principal *p, auth_class c, tally_str name);
const char *auth_principal_name(const auth_principal *p);

/* `*` matches any run of bytes (also none); every other byte itself. */
bool auth_glob_match(const char *glob, tally_str name);

#endif

/*
 * doc_requests.h — requests and replies written down in docs/PROTOCOL.md,
 * turned into bytes for tests and fuzz seeds.
 *
 * Two forms appear in the doc:
 *   - hex lines of the ```example blocks ("> 82 a1 76 ..", ".." is a byte
 *     that varies between runs);
 *   - the compact notation of the bad-input table and its setup block, a
 *     JSON-like text that says exactly which msgpack bytes to send:
 *
 *       {k: v, ...}  map (entries packed in the order written; a key may
 *                    repeat and need not be a string)
 *       [a, b, ...]  array; an element repeat(N, v) stands for N copies of v
 *       "text"       str; "ab"*3 is the str "ababab"
 *       bin(0a0b)    bin of those bytes; bin(00)*16 repeats them
 *       raw(dd ff)   these bytes spliced in as they are (counts as one
 *                    value of the enclosing map or array)
 *       12 -5 1.5    integers (smallest msgpack encoding) and a float64
 *       nil true false
 *     A request is one or more values, concatenated: `{...} raw(00)` is a
 *     map followed by a trailing byte, `raw()` is the empty message.
 *
 * Nothing here uses Check: errors are returned with a message, so the fuzz
 * seed generator (built with clang, without Check) shares this code.
 */
#ifndef TALLY_DOC_REQUESTS_H
#define TALLY_DOC_REQUESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Largest message the notation may describe. */
#define DOC_REQUEST_BYTES_MAX (4u * 1024 * 1024)
/* Largest hex line of an example. */
#define DOC_HEX_BYTES_MAX 65536

/* A growable byte buffer; free with doc_bytes_free. */
typedef struct doc_bytes {
    uint8_t *data;
    size_t len;
    size_t capacity;
    bool failed; /* out of memory or over DOC_REQUEST_BYTES_MAX */
} doc_bytes;

void doc_bytes_free(doc_bytes *b);

/* The whole of docs/NAME ($TALLY_DOCS/NAME, else docs/NAME), NUL-terminated
 * and malloc'd; NULL when it cannot be read. */
char *doc_read(const char *name);

/* Encode text in the notation above into out (initialised here). Returns 0,
 * or -1 with a reason in err. */
int doc_request_build(const char *text, doc_bytes *out, char *err, size_t err_size);

/* Parse one hex line ("xx xx .. xx", ending at NUL, newline or ')') into out
 * (capacity bytes); wildcard[i] (may be NULL) marks "..", stored as 0.
 * Returns the byte count, or -1 on a bad character or overflow. */
long doc_hex_parse(const char *line, uint8_t *out, bool *wildcard, size_t capacity);

/* One ```example block: its request and reply hex lines (pointers into the
 * doc, each ending at a newline). */
typedef struct doc_example {
    const char *request_hex;
    const char *reply_hex;
} doc_example;

/* The next example block at or after *cursor (start with the doc itself);
 * false when there is none, or (with *bad set) when a block lacks its "> "
 * or "< " line. */
bool doc_example_next(const char **cursor, doc_example *out, bool *bad);

/* One row of the bad-input table (strings malloc'd). */
typedef struct doc_bad_input_row {
    unsigned number;
    char *what;    /* the class of bad input */
    char *request; /* in the notation */
    char *code;    /* expected reply code */
    char *message; /* expected message; NULL: a write result (no message) */
    bool stored;   /* the outcome is stored under the request's key */
} doc_bad_input_row;

typedef struct doc_bad_input_table {
    doc_bad_input_row *rows;
    size_t count;
    char **setup;        /* the setup requests, in order */
    size_t setup_count;
} doc_bad_input_table;

/* Parse the bad-input table and its ```bad-input-setup block out of
 * PROTOCOL.md's text. Returns 0, or -1 with a reason in err. */
int doc_bad_input_parse(const char *doc, doc_bad_input_table *out, char *err, size_t err_size);
void doc_bad_input_free(doc_bad_input_table *t);

#endif

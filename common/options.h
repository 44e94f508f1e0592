/*
 * options.h — a program's options as one table: each row is a long option
 * (and, when it has one, a short one) and a config-file key at once (name,
 * value placeholder, default, help, the function that applies a value).
 * The table drives getopt_long, --help, the config file (`key = value`
 * lines), --print-config and the example config, so none of them can drift
 * from the others (docs/DESIGN.md, "The option table"). Every program uses
 * it: tallyd's rows are in net/server/tallyd_options.c, the tools' next to
 * their main(); a program without a config file never reads one
 * (options_load_command_line).
 *
 * Precedence: a row given on the command line takes the command line's
 * values (all of them: for a repeatable row they replace the file's list);
 * else the file's; else its default. Values are kept as the text given, so
 * --print-config prints what was given and can be read back.
 *
 * Order: settings (rows with a value that are config keys) apply in table
 * order; then every other row with a parse function (flags, command-line
 * only values) applies its default, then its values in the order the
 * command line gave them, so `--progress --no-progress` means the last.
 */
#ifndef TALLY_OPTIONS_H
#define TALLY_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define OPTIONS_VALUES_MAX 64            /* values of one repeatable key */
#define OPTIONS_FILE_BYTES_MAX (1 << 20) /* a config file */
#define OPTIONS_LINE_BYTES_MAX 4096      /* one line of it */
#define OPTIONS_WHY_BYTES_MAX 512        /* one error message */

enum {
    OPTIONS_REPEATABLE = 1 << 0,   /* may be given several times; each value applies */
    OPTIONS_COMMAND_LINE = 1 << 1, /* not a config-file key (--config, --help, ...) */
};

struct options_row;

/* Where options_parse_number stores a number (row->offset into the target). */
typedef enum options_store {
    OPTIONS_STORE_NONE,
    OPTIONS_STORE_UNSIGNED, /* unsigned */
    OPTIONS_STORE_U64,      /* uint64_t */
    OPTIONS_STORE_I64,      /* int64_t */
    OPTIONS_STORE_TEXT,     /* const char *, for options_parse_text */
    OPTIONS_STORE_BOOL,     /* bool, set by options_parse_flag */
} options_store;

/* Apply one value (text, never NULL; "" for a flag) to the program's
 * settings (target). Returns 0, or the exit status to stop with (2: a bad
 * value), with the reason (without the option's name) in why. */
typedef int options_parse_fn(const struct options_row *row, void *target, const char *text,
                             char *why, size_t why_size);

typedef struct options_row {
    const char *name;          /* the long option without "--", and the config key */
    const char *arg;           /* the value's placeholder ("URL"); NULL: a flag without value */
    const char *value_default; /* in config syntax; NULL: not set unless given (help says why) */
    const char *help;          /* one paragraph; the printers wrap it */
    options_parse_fn *parse;   /* NULL for command-line actions (--help, --config) */
    uint64_t min, max;         /* a number's range (max 0: not a number); help shows it */
    unsigned flags;            /* OPTIONS_REPEATABLE, OPTIONS_COMMAND_LINE */
    options_store store;       /* options_parse_number's rows: the field's type, */
    size_t offset;             /* its offset in the target (offsetof), */
    uint64_t scale;            /* and what the value is multiplied by (MiB: 1 << 20) */
    char short_name;           /* -c as well as --name; 0: none */
    const char *noun;          /* a number's error: "not a NOUN in range"; NULL: "number" */
} options_row;

/* The tail of a row whose value options_parse_number stores in field of
 * struct type (kind: UNSIGNED, U64 or I64), in [min, max]. */
#define OPTIONS_NUMBER(type, field, kind, min, max)                                         \
    options_parse_number, min, max, 0, OPTIONS_STORE_##kind, offsetof(type, field), 1
/* ... whose text options_parse_text keeps in a const char * field. */
#define OPTIONS_TEXT(type, field)                                                           \
    options_parse_text, 0, 0, 0, OPTIONS_STORE_TEXT, offsetof(type, field), 1
/* ... a flag (arg NULL) that options_parse_flag sets in a bool field. */
#define OPTIONS_FLAG(type, field)                                                           \
    options_parse_flag, 0, 0, 0, OPTIONS_STORE_BOOL, offsetof(type, field), 1
/* A macro's value as a default's text: OPTIONS_TEXT_OF(TALLY_CONTEXTS_DEFAULT)
 * (a plain number: a _Static_assert next to the row says so when in doubt). */
#define OPTIONS_STRINGIFY(x) #x
#define OPTIONS_TEXT_OF(x) OPTIONS_STRINGIFY(x)
/* The rows of --help and --version: options_load_command_line prints the
 * usage, or "PROGRAM VERSION" (the package's version). */
#define OPTIONS_ROW_HELP                                                                    \
    {"help", NULL, NULL, "print this help and exit", NULL, 0, 0, OPTIONS_COMMAND_LINE},      \
    {"version", NULL, NULL, "print the version and exit", NULL, 0, 0, OPTIONS_COMMAND_LINE}

/* Where a value came from: a file's line, or the command line (file NULL). */
typedef struct options_value {
    const char *text; /* into argv or the file's text; NULL for a flag */
    unsigned line;    /* the file's; for the command line, the option's place (1, 2, ...) */
} options_value;

typedef struct options_given {
    options_value values[OPTIONS_VALUES_MAX];
    unsigned count;
} options_given;

typedef struct options_set {
    const char *program;          /* "tallyd", for messages */
    const options_row *rows;
    size_t row_count;
    options_given *command_line;  /* row_count of each, calloc'd */
    options_given *file;
    const char *file_path;        /* NULL: no file read */
    char *file_text;              /* owned; values point into it */
    unsigned command_line_count;  /* options the command line gave */
    size_t arguments_max;         /* operands allowed after the options (0 unless set) */
    char **arguments;             /* they, into argv */
    size_t argument_count;
} options_set;

/* false when out of memory. */
bool options_init(options_set *s, const char *program, const options_row *rows, size_t count);
void options_free(options_set *s);

/* The row named name, or NULL. */
const options_row *options_find(const options_set *s, const char *name);
/* How many times a command-line-only row was given, and its last value. */
unsigned options_given_count(const options_set *s, const char *name, const char **last);

/* getopt_long over the table (and getopt's short options of the rows that
 * have one): records each value, and up to s->arguments_max operands.
 * Returns 0, or 2 after a usage message on stderr. */
int options_parse_command_line(options_set *s, int argc, char **argv);

/* Print "PROGRAM: message" and "Try 'PROGRAM --help'." on stderr; returns 2. */
int options_usage_error(const options_set *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

typedef void options_usage_fn(const options_set *s, FILE *f);

/* The whole command line of a program without a config file: options_init
 * s (program, rows, count), parse argv; with --help (a row named "help")
 * print usage to stdout; else apply the values (and defaults) to target.
 * s comes zeroed (`options_set set = {0}`), or with arguments_max set: it
 * is kept. Returns -1 to go on, else the exit status (0 after --help; 2, or
 * a parse function's, after a message on stderr; 1 out of memory). The
 * caller frees s either way (options_free); values point into argv. */
int options_load_command_line(options_set *s, const char *program, const options_row *rows,
                              size_t count, int argc, char **argv, void *target,
                              options_usage_fn *usage);

/* Read `key = value` lines: whole-line or trailing `#` comments, blank
 * lines; a key that is not repeatable may appear once. Returns 0, or 2
 * with "PATH:LINE: why" (or "PATH: why") in why. */
int options_read_file(options_set *s, const char *path, char *why, size_t why_size);

/* Apply every setting row's values (or its default) in table order.
 * Returns 0, or the parse function's status with "PATH:LINE: key: why" or
 * "--key: why" in why. */
int options_apply(const options_set *s, void *target, char *why, size_t why_size);

/* --help's option list: each row's name, placeholder and wrapped help. */
void options_print_help(const options_set *s, FILE *f);
/* Every key, each `key = value` line as applied (the defaults too); a key
 * without a value or default as a comment. Read back, it gives the same. */
void options_print_config(const options_set *s, FILE *f);
/* Every key commented out with its help and default. */
void options_print_example(const options_set *s, FILE *f);

/* text without its leading and trailing white space (cut in place). */
char *options_trim(char *text);

/* The parse function of a number: in [row->min, row->max], times
 * row->scale, stored as row->store says at row->offset in the target. */
int options_parse_number(const options_row *row, void *target, const char *text, char *why,
                         size_t why_size);
/* The parse function of a text kept as given (a pointer into argv or the
 * file) at row->offset. */
int options_parse_text(const options_row *row, void *target, const char *text, char *why,
                       size_t why_size);
/* The parse function of a flag: true at row->offset. */
int options_parse_flag(const options_row *row, void *target, const char *text, char *why,
                       size_t why_size);

#endif

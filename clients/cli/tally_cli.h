/*
 * tally_cli.h — what the parts of `tally` (clients/cli/main.c says what it
 * is) share: the parsed command line, the command and option tables, and
 * the functions each part offers the others.
 */
#ifndef TALLY_CLI_PROGRAM_H
#define TALLY_CLI_PROGRAM_H

#include "clients/json/json.h"
#include "clients/libtally/tally.h"
#include "common/limits.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLI_URL_DEFAULT "tcp://127.0.0.1:7450"
#define CLI_PUBLISH_DEFAULT "tcp://127.0.0.1:7451" /* tallyd --publish */
#define CLI_CONSUMER_DEFAULT "cli"
#define CLI_URL_BYTES_MAX 1024
#define CLI_TIMEOUT_MS_MAX 600000
#define CLI_RETRIES_MAX 100
#define CLI_LOG_LIMIT_DEFAULT 100
#define CLI_LOG_LIMIT_MAX 1000000
#define CLI_ENTITLEMENTS_FIRST 256      /* first capacity of an entitlement list */
#define CLI_ENTITLEMENTS_MAX 1048576    /* largest list the CLI will hold */
#define CLI_TABLE_CELL_BYTES_MAX 160    /* one cell of a human table */
#define CLI_TABLE_COLUMNS_MAX 16
#define CLI_TAIL_WAIT_MS 1000       /* a tail checks for an interrupt this often */
#define CLI_TAIL_FAILURES_MAX 10    /* failed reads in a row before a tail gives up */
#define CLI_TAIL_INSTANCE "tally-cli" /* the consumer instance of a tail without --instance */
#define CLI_TAIL_LINE_BYTES_MAX 512 /* one human line of tail */
#define HELP_COLUMNS 79     /* help text is wrapped to this width */
#define HELP_TEXT_COLUMN 22 /* where the text of an option starts */
#define SEP "\x1f" /* between the cells of a table_add format */

_Static_assert(TALLY_LOG_READ_EVENTS_MAX <= CLI_LOG_LIMIT_MAX, "a log page fits the CLI limit");

enum cli_exit {
    CLI_EXIT_OK = 0,
    CLI_EXIT_REJECTED = 1,
    CLI_EXIT_USAGE = 2,
    CLI_EXIT_UNREACHABLE = 3,
    CLI_EXIT_FAULT = 4, /* a server fault: stored nowhere, retry with the same key */
    CLI_EXIT_NOT_READY = 5, /* tally health: a readiness check fails (/readyz 503) */
};

/* Where a parsed value goes; one slot per argument or option name. */
typedef enum cli_slot {
    SLOT_HELP, SLOT_VERSION, SLOT_URL, SLOT_JSON, SLOT_TIMEOUT_MS, SLOT_CONSUMER, SLOT_RETRIES,
    SLOT_ACCOUNT, SLOT_TID, SLOT_SUBJECT, SLOT_FEATURE,
    SLOT_LEDGER, SLOT_CODE, SLOT_DEBITS_LIMITED, SLOT_CREDITS_LIMITED, SLOT_KEY,
    SLOT_LIMIT, SLOT_AFTER, SLOT_REVERSE, SLOT_FROM,
    SLOT_DEBIT, SLOT_CREDIT, SLOT_AMOUNT, SLOT_ID, SLOT_PENDING, SLOT_TIMEOUT_S,
    SLOT_UNTIL, SLOT_FOR, SLOT_SOURCE_ORDER,
    SLOT_PUBLISH, SLOT_SUBSCRIBER, SLOT_FROM_START, SLOT_FROM_NOW, SLOT_FROM_TIME, SLOT_EVENTS,
    SLOT_MAX_DELIVER, SLOT_ACK_WAIT_MS, SLOT_INSTANCE, SLOT_NAME, SLOT_SEQ,
    SLOT_PROGRESS, SLOT_NO_PROGRESS,
    SLOT_TOKEN_FILE,
    SLOT_TLS_CA, SLOT_TLS_CERT, SLOT_TLS_KEY, SLOT_MIN_SEQ,
    SLOT_USER_DATA_128, SLOT_USER_DATA_64, SLOT_USER_DATA_32,
    SLOT_BALANCING_DEBIT, SLOT_BALANCING_CREDIT, SLOT_CLOSING_DEBIT, SLOT_CLOSING_CREDIT,
    SLOT_IMPORTED_AT, SLOT_SEQ_MIN, SLOT_SEQ_MAX, SLOT_AT_TIME,
    SLOT_MAX_ACK_PENDING, SLOT_INACTIVE_EXPIRY_MS, SLOT_FILTER_TYPES, SLOT_FILTER_KINDS,
    SLOT_FILTER_SUBJECT, SLOT_CONTACT, SLOT_ALERT_ROUTE,
    SLOT_ENDPOINT, SLOT_REASON,
    SLOT_ENDPOINT_URL, SLOT_TYPES, SLOT_RETRY_SCHEDULE, SLOT_CONNECT_TIMEOUT_MS,
    SLOT_REQUEST_TIMEOUT_MS, SLOT_BACKFILL,
    SLOT_COUNT
} cli_slot;

typedef enum cli_kind {
    CLI_FLAG,     /* no value */
    CLI_TEXT,     /* min..max bytes */
    CLI_UINT,     /* decimal, min..max */
    CLI_AMOUNT,   /* decimal, 1 .. 2^63-1 */
    CLI_TID,      /* transfer id: 32 hex digits or a decimal number */
    CLI_TIME,     /* RFC 3339 -> Unix ms */
    CLI_DURATION, /* 30d, 12h, 90m, 45s, 1w, 1d12h -> ms */
} cli_kind;

/* One argument (name without dashes, e.g. "ID": positional, required) or
 * option ("--ledger") of a command. */
typedef struct cli_option {
    const char *name;
    cli_slot slot;
    cli_kind kind;
    uint64_t min, max;   /* CLI_UINT: value; CLI_TEXT: bytes */
    bool required;       /* an option that must be given; a positional that may be left out
                            is false (only the last ones) */
    const char *metavar; /* options with a value */
    const char *help;
} cli_option;

typedef struct cli_value {
    bool set;
    const char *text; /* as given */
    uint64_t u;       /* CLI_UINT */
    int64_t i;        /* CLI_AMOUNT, CLI_TIME, CLI_DURATION */
    tally_uuid id;    /* CLI_TID */
} cli_value;

typedef struct cli cli;

typedef struct cli_command {
    const char *name; /* one word, or "group word" */
    const char *summary;
    const cli_option *options; /* terminated by {NULL} */
    int (*run)(cli *c);
    const char *details; /* more help, or NULL */
} cli_command;

struct cli {
    cli_value v[SLOT_COUNT];
    const cli_command *command; /* NULL before the command is known */
    bool json;
    const char *url;
    const char *publish; /* tallyd's PUB endpoint */
    const char *consumer;
    tally_client *client;
    tally_client_options options; /* client's (cluster status opens one per node) */
    char key[TALLY_CLIENT_KEY_BYTES_MAX + 1];
    bool key_given; /* --key was passed */
};

static inline uint64_t value_or(const cli *c, cli_slot slot, uint64_t fallback)
{
    return c->v[slot].set ? c->v[slot].u : fallback;
}

/* An aligned text table: every cell a malloc'd string. */
typedef struct cli_table {
    const char *const *titles;
    size_t columns, rows, capacity;
    char **cells;
} cli_table;

/* What a listing read in pages (log, dlq list, account list) shows: its table's columns
 * and the entries of one read. */
typedef struct cli_listing_kind {
    const char *const *titles;
    size_t columns;
    uint32_t page_max; /* entries per read */
    size_t entry_bytes;
} cli_listing_kind;

/* A listing under way: at most --limit entries in all (default
 * CLI_LOG_LIMIT_DEFAULT), one page of entries at a time, the table they go
 * to unless --json, and the code of the read that ended it. */
typedef struct cli_listing {
    cli_table table;
    void *page;         /* page_max entries */
    uint32_t page_max;
    uint64_t remaining; /* entries still to show */
    int rc;             /* TALLY_ok, or the failed read's code */
} cli_listing;

/* ---- commands.c ---- */

extern const cli_option cli_global_options[]; /* terminated by {NULL} */
extern const cli_command cli_commands[];      /* terminated by {NULL} */

/* ---- auth.c ---- */
/* The token of --token-file (else $TALLY_TOKEN_FILE) into out ("" when
 * neither is given: libtally then reads $TALLY_TOKEN); a usage error when
 * the file is not private or not one line. */
int cli_token_resolve(cli *c, char *out, size_t size);
int run_auth_hash(cli *c);

/* ---- reads.c: what queries.c shows its records with ---- */
extern const cli_listing_kind account_listing;
void accounts_output(const cli *c, cli_table *t, const void *page, size_t count);
extern const char *const transfer_titles[12];
void transfer_row(cli_table *t, const tally_transfer_info *x);

/* ---- queries.c ---- */
/* Whether account list was given a filter (then it is account_query). */
bool account_list_filtered(const cli *c);
int run_account_query(cli *c);
int run_transfer_list(cli *c);

/* ---- parse.c ---- */

/* The n-th positional entry of table, or NULL. */
const cli_option *positional_nth(const cli_option *table, int n);
/* The option argv[*i] ("--name" or "--name=value"), looked up in the
 * command's table, then the global one; consumes its value. */
int parse_option(cli *c, int argc, char **argv, int *i);
/* Parse argv[start..] against the command's table (and the global options). */
int parse_command_args(cli *c, int argc, char **argv, int start);
/* A usage error when a required argument or option is missing. */
int check_required(cli *c);

/* ---- help.c ---- */

void print_global_help(void);
void print_usage_line(const cli_command *cmd);
void print_command_help(const cli_command *cmd);

/* ---- values.c ---- */

/* A transfer id: exactly 32 hex digits (dashes anywhere are ignored), or a
 * decimal number n (1 .. 2^64-1) standing for the 16-byte big-endian n. */
bool parse_tid(const char *text, tally_uuid *out);
/* RFC 3339 date-time or a bare date to Unix ms, 1 .. TALLY_TIME_MS_MAX. */
bool parse_time(const char *text, int64_t *out);
/* "30d", "12h", "90m", "45s", "1w", "500ms", or several: "1d12h". */
bool parse_duration(const char *text, int64_t *out);

/* ---- output.c ---- */

/* Says so on stderr and exits (CLI_EXIT_REJECTED). */
void cli_out_of_memory(void) __attribute__((noreturn));
/* "tally: <message>" and where to find help on stderr; CLI_EXIT_USAGE. */
int usage_error(const cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The exit code of a libtally or server code. */
int exit_code_of(int code);
bool is_transport_fault(int code);
void table_init(cli_table *t, const char *const *titles, size_t columns);
/* Add one row of t->columns printf-formatted cells, separated by SEP in fmt.
 * Control characters in the cells (from keys, subjects...) print as '?'. */
void table_add(cli_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void table_print_free(cli_table *t);
/* Print o as one compact line and release it. */
void json_emit(json_t *o);
/* Start a listing of kind; returns its page buffer. */
void *listing_begin(const cli *c, cli_listing *l, const cli_listing_kind *kind);
/* How many entries to ask for next: what is left, at most a page; 0 when
 * the listing is done. */
uint32_t listing_next(const cli_listing *l);
/* count entries were shown. */
void listing_took(cli_listing *l, size_t count);
/* Print the table (unless --json, or when show is false) and free the listing. */
void listing_end(const cli *c, cli_listing *l, bool show);
/* One page of a listing read by an exclusive cursor (dlq list, account
 * list): up to limit entries after `after` into page, *count of them,
 * *next the cursor of the page after (0: no page follows). */
typedef int (*listing_read_fn)(cli *c, uint64_t after, uint32_t limit, void *page, size_t *count,
                               uint64_t *next);
/* Show count entries of page: one JSON line each with --json, else rows of t. */
typedef void (*listing_show_fn)(const cli *c, cli_table *t, const void *page, size_t count);
/* Read and show pages from after on until --limit entries were shown or
 * no page follows, then print the table (also after a failed read, when
 * it has rows) and free the listing; l->rc is the code of the read that
 * failed. Returns the cursor of the page after the last one shown, 0 when
 * none follows. */
uint64_t listing_by_cursor(cli *c, cli_listing *l, uint64_t after, listing_read_fn read,
                           listing_show_fn show);
/* A time for a table: RFC 3339, or "-" for 0. */
void time_text(int64_t ms, char out[40]);
/* Tell a person what failed and, for a write, how to retry it. */
void explain_failure(const cli *c, const char *what, int code, bool write);
/* Print a failed read and return the exit code. */
int read_failure(const cli *c, const char *what, int rc);

/* ---- writes.c ---- */

int run_account_open(cli *c);
int run_transfer(cli *c);
int run_post(cli *c);
int run_void(cli *c);
int run_reverse(cli *c);
int run_grant(cli *c);
int run_extend(cli *c);
int run_revoke(cli *c);
int run_endpoint_disable(cli *c);
int run_endpoint_enable(cli *c);
int run_endpoint_rotate_secret(cli *c);
int run_endpoint_recover(cli *c);
int run_endpoint_create(cli *c);
int run_endpoint_update(cli *c);
int run_endpoint_delete(cli *c);
int run_endpoint_list(cli *c);

/* ---- reads.c ---- */

int run_account_get(cli *c);
int run_account_history(cli *c);
int run_account_balances(cli *c);
int run_account_balance_at(cli *c);
int run_account_list(cli *c);
int run_transfer_get(cli *c);
int run_entitlements(cli *c);
int run_log(cli *c);
int run_stats(cli *c);
int run_backup(cli *c);

/* backup_progress.c: the progress line of a backup (--progress,
 * --no-progress, else when stderr is a terminal): started before the
 * request, stopped (the line cleared) after it. start returns NULL when no
 * progress is shown; stop accepts NULL. */
typedef struct backup_progress backup_progress;
backup_progress *backup_progress_start(cli *c, const char *dest);
void backup_progress_stop(backup_progress *bp);
int run_health(cli *c);
int run_cluster_status(cli *c);
int run_endpoint_show(cli *c);
int run_endpoint_attempts(cli *c);

/* ---- tail.c ---- */

int run_tail(cli *c);

/* ---- subscribers.c ---- */

int run_subscribers(cli *c);
int run_subscriber_delete(cli *c);
int run_subscriber_update(cli *c);
int run_dlq_list(cli *c);
int run_dlq_replay(cli *c);
int run_dlq_discard(cli *c);
/* A subscriber's metrics and settings as --json prints them (subscribers
 * and stats). */
json_t *subscriber_json(const tally_subscriber_info *i);
/* The settings beyond those: filter, inactivity limit, owner, partitions
 * (`subscribers show`, `subscriber update`). */
json_t *subscriber_settings_json(const tally_subscriber_info *i);

/* ---- subscriber_show.c ---- */

int run_subscriber_show(cli *c);

#endif

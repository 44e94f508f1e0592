/*
 * tally_cli.c — `tally`, the command-line client of tallyd, built on libtally.
 *
 * This file owns the command line: one table of commands, each with one table
 * of its arguments and options (cli_option), a single parser that checks every
 * value against its entry before a command runs, the help generated from the
 * same tables, and the output of each command as aligned tables (default) or
 * one JSON object per result (--json, written with jansson).
 *
 * Writes always carry an idempotency key. Without --key the CLI makes one
 * (a UUIDv7, or "transfer-<id>" when a transfer names its --id) and prints it,
 * so a person can repeat the command with --key to retry it; libtally reuses
 * the same key for its own retries. A transfer without --id takes its id from
 * the key (tally_uuid_from_key), so repeating it with the same --key is the
 * same transfer with the same fingerprint: a replay, never a second transfer.
 *
 * Exit codes: 0 ok (a replay is ok), 1 the server answered with any other
 * code, 2 usage error, 3 server unreachable, timed out, overloaded or
 * shutting down after the retries.
 */
#include "config.h"

#include "clients/tally.h"
#include "common/limits.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    SLOT_MAX_DELIVER, SLOT_ACK_WAIT_MS, SLOT_NAME, SLOT_SEQ,
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
    char key[TALLY_CLIENT_KEY_BYTES_MAX + 1];
    bool key_given; /* --key was passed */
};

/* ---- small helpers ---- */

static void cli_out_of_memory(void)
{
    fputs("tally: out of memory\n", stderr);
    exit(CLI_EXIT_REJECTED);
}

static int usage_error(const cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int usage_error(const cli *c, const char *fmt, ...)
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

static int exit_code_of(int code)
{
    switch (code) {
    case TALLY_ok: return CLI_EXIT_OK;
    case TALLY_unreachable:
    case TALLY_timed_out:
    case TALLY_overloaded:
    case TALLY_shutting_down: return CLI_EXIT_UNREACHABLE;
    case TALLY_invalid_argument: return CLI_EXIT_USAGE; /* refused by libtally: nothing sent */
    default: return CLI_EXIT_REJECTED;
    }
}

static bool is_transport_fault(int code) { return exit_code_of(code) == CLI_EXIT_UNREACHABLE; }

static uint64_t value_or(const cli *c, cli_slot slot, uint64_t fallback)
{
    return c->v[slot].set ? c->v[slot].u : fallback;
}

/* ---- values: numbers, transfer ids, times, durations ---- */

/* Strict unsigned decimal: digits only, no sign, no spaces, no overflow. */
static bool parse_u64(const char *text, uint64_t *out)
{
    uint64_t v = 0;
    if (!*text)
        return false;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        if (__builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v))
            return false;
    }
    *out = v;
    return true;
}

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* A transfer id: exactly 32 hex digits (dashes anywhere are ignored), or a
 * decimal number n (1 .. 2^64-1) standing for the 16-byte big-endian n. */
static bool parse_tid(const char *text, tally_uuid *out)
{
    tally_uuid id = {{0}};
    size_t digits = 0;
    bool hex = true;
    for (const char *p = text; *p && hex; p++) {
        if (*p == '-')
            continue;
        int h = hex_value(*p);
        if (h < 0 || digits == 32)
            hex = false;
        else
            id.bytes[digits / 2] = (uint8_t)(id.bytes[digits / 2] | h << (digits % 2 ? 0 : 4));
        digits++;
    }
    if (hex && digits == 32) {
        *out = id;
        return true;
    }
    uint64_t n;
    if (!parse_u64(text, &n))
        return false;
    memset(out, 0, sizeof(*out));
    for (int i = 0; i < 8; i++)
        out->bytes[15 - i] = (uint8_t)(n >> (8 * i));
    return true;
}

static void tid_format(const tally_uuid *id, char out[33])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = digits[id->bytes[i] >> 4];
        out[2 * i + 1] = digits[id->bytes[i] & 15];
    }
    out[32] = '\0';
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static unsigned days_in_month(unsigned y, unsigned m)
{
    static const unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : days[m - 1];
}

/* Read exactly n digits at *p into *out; advance *p. */
static bool read_digits(const char **p, int n, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < n; i++) {
        char ch = (*p)[i];
        if (ch < '0' || ch > '9')
            return false;
        v = v * 10 + (unsigned)(ch - '0');
    }
    *p += n;
    *out = v;
    return true;
}

/* "[.fraction](Z | +hh:mm | -hh:mm)": adds the milliseconds of the fraction
 * to *ms and stores the offset east of UTC in minutes. */
static bool parse_fraction_and_offset(const char *p, int64_t *ms, int64_t *offset_min)
{
    if (*p == '.') {
        int n = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, n++)
            if (n < 3)
                *ms += (*p - '0') * (n == 0 ? 100 : n == 1 ? 10 : 1);
        if (n == 0 || n > 9)
            return false;
    }
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
        *offset_min = 0;
        return true;
    }
    unsigned oh, om;
    int sign = *p == '+' ? 1 : *p == '-' ? -1 : 0;
    if (sign == 0)
        return false;
    p++;
    if (!read_digits(&p, 2, &oh) || *p++ != ':' || !read_digits(&p, 2, &om) || *p || oh > 23 ||
        om > 59)
        return false;
    *offset_min = sign * (int64_t)(oh * 60 + om);
    return true;
}

/* RFC 3339 date-time ("2027-01-01T00:00:00Z", "...T12:00:00.250+02:00") or a
 * bare date (midnight UTC) to Unix milliseconds, 1 .. TALLY_TIME_MS_MAX. */
static bool parse_time(const char *text, int64_t *out)
{
    const char *p = text;
    unsigned y, mo, d, h = 0, mi = 0, s = 0;
    int64_t ms = 0, offset_min = 0;
    if (!read_digits(&p, 4, &y) || *p++ != '-' || !read_digits(&p, 2, &mo) || *p++ != '-' ||
        !read_digits(&p, 2, &d) || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo))
        return false;
    if (*p) {
        if (*p != 'T' && *p != 't' && *p != ' ')
            return false;
        p++;
        if (!read_digits(&p, 2, &h) || *p++ != ':' || !read_digits(&p, 2, &mi) || *p++ != ':' ||
            !read_digits(&p, 2, &s) || h > 23 || mi > 59 || s > 59)
            return false;
        if (!parse_fraction_and_offset(p, &ms, &offset_min))
            return false;
    }
    int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s - offset_min * 60;
    int64_t total = secs * 1000 + ms;
    if (total < 1 || total > TALLY_TIME_MS_MAX)
        return false;
    *out = total;
    return true;
}

/* Unix ms to "2027-01-01T00:00:00Z" (".250" added when not a whole second). */
static void time_format(int64_t ms, char out[40])
{
    time_t secs = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
    int frac = (int)(ms - (int64_t)secs * 1000);
    struct tm tm;
    if (!gmtime_r(&secs, &tm)) {
        snprintf(out, 40, "%" PRId64 "ms", ms);
        return;
    }
    size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
    if (frac)
        snprintf(out + n, 40 - n, ".%03dZ", frac);
    else
        snprintf(out + n, 40 - n, "Z");
}

/* "30d", "12h", "90m", "45s", "1w", "500ms", or several: "1d12h". */
static bool parse_duration(const char *text, int64_t *out)
{
    static const struct { const char *unit; int64_t ms; } units[] = {
        {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}, {"w", 604800000}};
    int64_t total = 0;
    const char *p = text;
    if (!*p)
        return false;
    while (*p) {
        int64_t n = 0;
        const char *start = p;
        for (; *p >= '0' && *p <= '9'; p++)
            if (__builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, *p - '0', &n))
                return false;
        size_t u = 0;
        while (u < sizeof(units) / sizeof(units[0]) &&
               strncmp(p, units[u].unit, strlen(units[u].unit)) != 0)
            u++;
        if (p == start || u == sizeof(units) / sizeof(units[0]))
            return false;
        p += strlen(units[u].unit);
        if (__builtin_mul_overflow(n, units[u].ms, &n) || __builtin_add_overflow(total, n, &total))
            return false;
    }
    if (total < 1 || total > TALLY_GRANT_DURATION_MS_MAX)
        return false;
    *out = total;
    return true;
}

/* ---- the option tables ---- */

#define OPT_END {NULL}
#define OPT_KEY                                                                                    \
    {"--key", SLOT_KEY, CLI_TEXT, 1, TALLY_KEY_BYTES_MAX, false, "K",                              \
     "idempotency key, 1-128 bytes (default: a new UUIDv7, printed)"}
#define OPT_LEDGER                                                                                 \
    {"--ledger", SLOT_LEDGER, CLI_UINT, 1, UINT32_MAX, false, "N", "ledger, 1..2^32-1 (default 1)"}
#define OPT_CODE(what)                                                                             \
    {"--code", SLOT_CODE, CLI_UINT, 1, UINT16_MAX, false, "N", what " code, 1..65535 (default 1)"}
#define OPT_ORDER                                                                                  \
    {"--source-order", SLOT_SOURCE_ORDER, CLI_UINT, 0, UINT64_MAX, false, "N",                     \
     "provider's ordering value; a command not newer than the last applied is `stale`"}
#define OPT_UNTIL(what)                                                                            \
    {"--until", SLOT_UNTIL, CLI_TIME, 0, 0, false, "RFC3339",                                      \
     what ", e.g. 2027-01-01T00:00:00Z or 2027-01-01T09:00:00+02:00"}
#define OPT_FOR(what)                                                                              \
    {"--for", SLOT_FOR, CLI_DURATION, 0, 0, false, "DURATION",                                     \
     what ", e.g. 30d, 12h, 90m, 45s, 1w, 1d12h (at most 100 years)"}
#define ARG_ACCOUNT                                                                                \
    {"ID", SLOT_ACCOUNT, CLI_UINT, 1, UINT64_MAX, true, NULL, "account id, 1..2^64-1"}
#define ARG_TID {"TID", SLOT_TID, CLI_TID, 0, 0, true, NULL, "transfer id of the hold"}
#define ARG_SUBJECT                                                                                \
    {"SUBJECT", SLOT_SUBJECT, CLI_TEXT, 1, TALLY_SUBJECT_BYTES_MAX, true, NULL,                    \
     "who has access, 1-128 bytes"}
#define ARG_FEATURE                                                                                \
    {"FEATURE", SLOT_FEATURE, CLI_TEXT, 1, TALLY_FEATURE_BYTES_MAX, true, NULL,                    \
     "what they have access to, 1-64 bytes"}

static const cli_option global_options[] = {
    {"--url", SLOT_URL, CLI_TEXT, 1, CLI_URL_BYTES_MAX, false, "URL",
     "tallyd's NNG address (default $TALLY_URL, else " CLI_URL_DEFAULT ")"},
    {"--publish", SLOT_PUBLISH, CLI_TEXT, 1, CLI_URL_BYTES_MAX, false, "URL",
     "tallyd's event publisher, for tail (default $TALLY_PUBLISH, else " CLI_PUBLISH_DEFAULT
     ")"},
    {"--json", SLOT_JSON, CLI_FLAG, 0, 0, false, NULL,
     "print one JSON object per result (one per line)"},
    {"--timeout-ms", SLOT_TIMEOUT_MS, CLI_UINT, 1, CLI_TIMEOUT_MS_MAX, false, "N",
     "wait this long for each attempt (default 5000)"},
    {"--consumer", SLOT_CONSUMER, CLI_TEXT, 1, TALLY_CONSUMER_BYTES_MAX, false, "NAME",
     "namespace of the keys (default $TALLY_CONSUMER, else " CLI_CONSUMER_DEFAULT ")"},
    {"--retries", SLOT_RETRIES, CLI_UINT, 0, CLI_RETRIES_MAX, false, "N",
     "extra attempts, same key, when the server is unreachable or busy (default 3)"},
    {"--help", SLOT_HELP, CLI_FLAG, 0, 0, false, NULL, "explain tally, or the command"},
    {"--version", SLOT_VERSION, CLI_FLAG, 0, 0, false, NULL, "print the version"},
    OPT_END};

static const cli_option account_open_options[] = {
    ARG_ACCOUNT, OPT_LEDGER, OPT_CODE("account"),
    {"--debits-must-not-exceed-credits", SLOT_DEBITS_LIMITED, CLI_FLAG, 0, 0, false, NULL,
     "refuse transfers that would take debits above credits"},
    {"--credits-must-not-exceed-debits", SLOT_CREDITS_LIMITED, CLI_FLAG, 0, 0, false, NULL,
     "refuse transfers that would take credits above debits"},
    OPT_KEY, OPT_END};

static const cli_option account_get_options[] = {ARG_ACCOUNT, OPT_END};

static const cli_option account_history_options[] = {
    ARG_ACCOUNT,
    {"--limit", SLOT_LIMIT, CLI_UINT, 1, TALLY_HISTORY_ENTRIES_MAX, false, "N",
     "entries, 1..1000 (default 100)"},
    {"--after", SLOT_AFTER, CLI_UINT, 0, UINT64_MAX, false, "SEQ",
     "entries after this seq (before it with --reverse): the next page"},
    {"--reverse", SLOT_REVERSE, CLI_FLAG, 0, 0, false, NULL, "newest first"},
    OPT_END};

static const cli_option transfer_options[] = {
    {"--debit", SLOT_DEBIT, CLI_UINT, 1, UINT64_MAX, true, "ID", "account debited"},
    {"--credit", SLOT_CREDIT, CLI_UINT, 1, UINT64_MAX, true, "ID", "account credited"},
    {"--amount", SLOT_AMOUNT, CLI_AMOUNT, 0, 0, true, "N", "amount, 1..2^63-1"},
    OPT_LEDGER, OPT_CODE("transfer"),
    {"--id", SLOT_ID, CLI_TID, 0, 0, false, "TID",
     "transfer id: 32 hex digits (dashes allowed) or a decimal number (default: from the key)"},
    {"--pending", SLOT_PENDING, CLI_FLAG, 0, 0, false, NULL,
     "hold the amount (post or void it later)"},
    {"--timeout-s", SLOT_TIMEOUT_S, CLI_UINT, 0, TALLY_HOLD_TIMEOUT_S_MAX, false, "N",
     "with --pending: the hold expires after N seconds (default 0: never)"},
    OPT_KEY, OPT_END};

static const cli_option post_options[] = {
    ARG_TID,
    {"--amount", SLOT_AMOUNT, CLI_AMOUNT, 0, 0, false, "N",
     "amount to post, at most the held amount (default: all of it)"},
    OPT_KEY, OPT_END};

static const cli_option void_options[] = {ARG_TID, OPT_KEY, OPT_END};

static const cli_option grant_options[] = {
    ARG_SUBJECT, ARG_FEATURE, OPT_UNTIL("end of validity"),
    OPT_FOR("valid for this long from now"), OPT_ORDER, OPT_KEY, OPT_END};

static const cli_option extend_options[] = {
    ARG_SUBJECT, ARG_FEATURE, OPT_UNTIL("new end"),
    OPT_FOR("instead of --until: move the current end this much later"), OPT_ORDER, OPT_KEY,
    OPT_END};

static const cli_option revoke_options[] = {ARG_SUBJECT, ARG_FEATURE, OPT_ORDER, OPT_KEY, OPT_END};

static const cli_option entitlements_options[] = {
    {"SUBJECT", SLOT_SUBJECT, CLI_TEXT, 1, TALLY_SUBJECT_BYTES_MAX, true, NULL,
     "whose entitlements to list"},
    OPT_END};

static const cli_option log_options[] = {
    {"--from", SLOT_FROM, CLI_UINT, 0, UINT64_MAX, false, "SEQ", "first seq (default 1)"},
    {"--limit", SLOT_LIMIT, CLI_UINT, 1, CLI_LOG_LIMIT_MAX, false, "N",
     "events, 1..1000000 (default 100; read in pages of 1000)"},
    OPT_END};

static const cli_option stats_options[] = {OPT_END};

#define ARG_NAME                                                                                   \
    {"NAME", SLOT_NAME, CLI_TEXT, 1, TALLY_SUBSCRIBER_NAME_BYTES_MAX, true, NULL,                  \
     "subscriber name, 1-64 bytes of A-Z a-z 0-9 . _ -"}

static const cli_option tail_options[] = {
    {"--subscriber", SLOT_SUBSCRIBER, CLI_TEXT, 1, TALLY_SUBSCRIBER_NAME_BYTES_MAX, false, "NAME",
     "read as the durable subscriber NAME (created if needed): acknowledge what was read, "
     "continue there next time"},
    {"--from", SLOT_FROM, CLI_UINT, 1, UINT64_MAX, false, "SEQ", "start at this seq"},
    {"--from-start", SLOT_FROM_START, CLI_FLAG, 0, 0, false, NULL, "start at the first event"},
    {"--from-now", SLOT_FROM_NOW, CLI_FLAG, 0, 0, false, NULL,
     "start after the last event (the default without --subscriber)"},
    {"--from-time", SLOT_FROM_TIME, CLI_TIME, 0, 0, false, "RFC3339",
     "with --subscriber: start at the first event committed at or after this time"},
    {"--count", SLOT_EVENTS, CLI_UINT, 1, UINT64_MAX, false, "N",
     "exit after N events (default: follow until interrupted)"},
    {"--max-deliver", SLOT_MAX_DELIVER, CLI_UINT, 1, TALLY_SUB_MAX_DELIVER_MAX, false, "N",
     "new subscriber: deliveries of an event before it is parked (default 5)"},
    {"--ack-wait-ms", SLOT_ACK_WAIT_MS, CLI_UINT, TALLY_SUB_ACK_WAIT_MS_MIN,
     TALLY_SUB_ACK_WAIT_MS_MAX, false, "N",
     "new subscriber: redeliver an unacknowledged event after N ms (default 30000)"},
    OPT_END};

static const cli_option subscribers_options[] = {OPT_END};

static const cli_option subscriber_delete_options[] = {ARG_NAME, OPT_END};

static const cli_option dlq_list_options[] = {
    ARG_NAME,
    {"--after", SLOT_AFTER, CLI_UINT, 0, UINT64_MAX, false, "SEQ", "dead letters after this seq"},
    {"--limit", SLOT_LIMIT, CLI_UINT, 1, CLI_LOG_LIMIT_MAX, false, "N",
     "dead letters, 1..1000000 (default 100; read in pages of 1000)"},
    OPT_END};

static const cli_option dlq_replay_options[] = {
    ARG_NAME,
    {"SEQ", SLOT_SEQ, CLI_UINT, 1, UINT64_MAX, false, NULL,
     "the dead letter to deliver again (default: all of them)"},
    OPT_END};

static const cli_option backup_options[] = {
    {"DEST", SLOT_NAME, CLI_TEXT, 2, TALLY_PATH_BYTES_MAX - 1, true, NULL,
     "absolute path of a new directory on tallyd's machine"},
    OPT_END};

static const cli_option dlq_discard_options[] = {
    ARG_NAME, {"SEQ", SLOT_SEQ, CLI_UINT, 1, UINT64_MAX, true, NULL, "the dead letter to remove"},
    OPT_END};

/* ---- parsing ---- */

static const cli_option *option_find(const cli_option *table, const char *name, size_t len)
{
    for (; table && table->name; table++)
        if (table->name[0] == '-' && strlen(table->name) == len &&
            strncmp(table->name, name, len) == 0)
            return table;
    return NULL;
}

static const char *kind_expectation(const cli_option *o)
{
    switch (o->kind) {
    case CLI_UINT: return "a whole number in range";
    case CLI_AMOUNT: return "an amount, 1..9223372036854775807";
    case CLI_TID: return "32 hex digits (dashes allowed) or a decimal number 1..2^64-1";
    case CLI_TIME: return "an RFC 3339 time such as 2027-01-01T00:00:00Z, up to year 9999";
    case CLI_DURATION: return "a duration such as 30d, 12h, 90m, 45s or 1w, up to 100 years";
    default: return "a value";
    }
}

/* Convert text for o and store it in its slot; a usage error if it does not fit. */
static int option_store(cli *c, const cli_option *o, const char *text)
{
    cli_value *v = &c->v[o->slot];
    bool ok = true;
    size_t len = strlen(text);
    switch (o->kind) {
    case CLI_FLAG: break;
    case CLI_TEXT:
        if (len < o->min || len > o->max)
            return usage_error(c, "%s must be %" PRIu64 " to %" PRIu64 " bytes long", o->name,
                               o->min, o->max);
        break;
    case CLI_UINT: ok = parse_u64(text, &v->u) && v->u >= o->min && v->u <= o->max; break;
    case CLI_AMOUNT: ok = parse_u64(text, &v->u) && v->u >= 1 && v->u <= INT64_MAX;
        v->i = (int64_t)v->u;
        break;
    case CLI_TID: ok = parse_tid(text, &v->id); break;
    case CLI_TIME: ok = parse_time(text, &v->i); break;
    case CLI_DURATION: ok = parse_duration(text, &v->i); break;
    }
    if (!ok && o->kind == CLI_UINT)
        return usage_error(c, "%s: expected a whole number %" PRIu64 "..%" PRIu64 ", got '%s'",
                           o->name, o->min, o->max, text);
    if (!ok)
        return usage_error(c, "%s: expected %s, got '%s'", o->name, kind_expectation(o), text);
    if (v->set && o->kind != CLI_FLAG)
        return usage_error(c, "%s given twice", o->name);
    v->set = true;
    v->text = text;
    return CLI_EXIT_OK;
}

/* The option argv[*i] ("--name" or "--name=value"), looked up in the
 * command's table, then the global one; consumes its value. */
static int parse_option(cli *c, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const cli_option *o = c->command ? option_find(c->command->options, arg, len) : NULL;
    if (!o)
        o = option_find(global_options, arg, len);
    if (!o)
        return usage_error(c, "unknown option '%.*s'", (int)len, arg);
    if (o->kind == CLI_FLAG) {
        if (eq)
            return usage_error(c, "%s takes no value", o->name);
        return option_store(c, o, "");
    }
    if (eq)
        return option_store(c, o, eq + 1);
    if (*i + 1 >= argc)
        return usage_error(c, "%s needs a value (%s)", o->name, o->metavar);
    *i += 1;
    return option_store(c, o, argv[*i]);
}

/* The n-th positional entry of table, or NULL. */
static const cli_option *positional_nth(const cli_option *table, int n)
{
    for (; table->name; table++)
        if (table->name[0] != '-' && n-- == 0)
            return table;
    return NULL;
}

/* Parse argv[start..] against the command's table (and the global options). */
static int parse_command_args(cli *c, int argc, char **argv, int start)
{
    int positionals = 0;
    bool options_done = false;
    for (int i = start; i < argc; i++) {
        int rc;
        if (!options_done && strcmp(argv[i], "--") == 0) {
            options_done = true;
            continue;
        }
        if (!options_done && argv[i][0] == '-' && argv[i][1] == '-') {
            rc = parse_option(c, argc, argv, &i);
        } else {
            const cli_option *o = positional_nth(c->command->options, positionals++);
            if (!o)
                return usage_error(c, "unexpected argument '%s'", argv[i]);
            rc = option_store(c, o, argv[i]);
        }
        if (rc != CLI_EXIT_OK)
            return rc;
        if (c->v[SLOT_HELP].set)
            return CLI_EXIT_OK; /* help wins over whatever else is wrong */
    }
    return CLI_EXIT_OK;
}

static int check_required(cli *c)
{
    for (const cli_option *o = c->command->options; o->name; o++) {
        if (c->v[o->slot].set)
            continue;
        if (o->name[0] != '-' && o->required)
            return usage_error(c, "missing %s", o->name);
        if (o->required)
            return usage_error(c, "missing %s %s", o->name, o->metavar);
    }
    return CLI_EXIT_OK;
}

/* ---- help ---- */

static const char help_keys[] =
    "Keys and transfer ids:\n"
    "  Every write carries an idempotency key under the consumer name. Sending the\n"
    "  same key again with the same fields returns the first outcome (\"replayed\")\n"
    "  and changes nothing, so repeating a command with the same --key is always\n"
    "  safe. Without --key, tally generates a key (UUIDv7), uses it for all its own\n"
    "  retries and prints it (on stderr; the \"key\" field with --json).\n"
    "  A transfer id (TID) is 32 hex digits (dashes allowed) or a decimal number n,\n"
    "  meaning the 16-byte big-endian n. For `transfer`:\n"
    "    - without --id, the id is derived from the key (SHA-256 of consumer and\n"
    "      key) and printed: repeating the command with the same --key is a true\n"
    "      retry (same id, same fields), never a second transfer;\n"
    "    - with --id and no --key, the key is \"transfer-<32 hex digits of the id>\",\n"
    "      so repeating the same command is a retry too.\n";

static const char help_exit[] =
    "Exit codes:\n"
    "  0  ok (a replayed write is ok)\n"
    "  1  the server answered with any other code (a rejection such as\n"
    "     exceeds_credits, not_found, or a server fault); the code is printed\n"
    "  2  usage error: bad option or argument\n"
    "  3  server unreachable, timed out, overloaded or shutting down after the\n"
    "     retries; for a write, retry with the printed key to learn its outcome\n";

/* Print item at *col after a space (none at indent), first moving to a new
 * line indented by indent if it would pass HELP_COLUMNS. */
static void print_item(const char *item, size_t len, int indent, int *col)
{
    if (*col > indent && *col + 1 + (int)len > HELP_COLUMNS) {
        printf("\n%*s", indent, "");
        *col = indent;
    } else if (*col != indent) {
        putchar(' ');
        *col += 1;
    }
    printf("%.*s", (int)len, item);
    *col += (int)len;
}

/* The words of text, wrapped (see print_item). */
static void print_words(const char *text, int indent, int *col)
{
    for (const char *p = text; *p;) {
        p += strspn(p, " ");
        size_t len = strcspn(p, " ");
        if (len)
            print_item(p, len, indent, col);
        p += len;
    }
}

/* "  left    text..." with text wrapped in a column from HELP_TEXT_COLUMN. */
static void print_entry(const char *left, const char *text, const char *more)
{
    int col = printf("  %s", left);
    if (col >= HELP_TEXT_COLUMN) {
        putchar('\n');
        col = 0;
    }
    col += printf("%*s", HELP_TEXT_COLUMN - col, "");
    print_words(text, HELP_TEXT_COLUMN, &col);
    if (more)
        print_words(more, HELP_TEXT_COLUMN, &col);
    putchar('\n');
}

static void print_option_lines(const cli_option *table, bool positional)
{
    for (const cli_option *o = table; o->name; o++) {
        if ((o->name[0] != '-') != positional)
            continue;
        char left[64];
        snprintf(left, sizeof(left), "%s%s%s", o->name, o->metavar ? " " : "",
                 o->metavar ? o->metavar : "");
        print_entry(left, o->help, o->required && !positional ? "(required)" : NULL);
    }
}

static void print_usage_line(const cli_command *cmd)
{
    char item[80];
    int col = printf("usage: tally %s", cmd->name), indent = col + 1;
    for (const cli_option *o = cmd->options; o->name; o++) {
        if (o->name[0] != '-' && o->required)
            print_item(o->name, strlen(o->name), indent, &col);
        else if (o->name[0] != '-')
            print_item(item, (size_t)snprintf(item, sizeof(item), "[%s]", o->name), indent, &col);
        else if (o->required)
            print_item(item, (size_t)snprintf(item, sizeof(item), "%s %s", o->name, o->metavar),
                       indent, &col);
    }
    for (const cli_option *o = cmd->options; o->name; o++) {
        if (o->name[0] != '-' || o->required)
            continue;
        int len = snprintf(item, sizeof(item), "[%s%s%s]", o->name, o->metavar ? " " : "",
                           o->metavar ? o->metavar : "");
        print_item(item, (size_t)len, indent, &col);
    }
    putchar('\n');
}

static void print_command_help(const cli_command *cmd)
{
    print_usage_line(cmd);
    printf("\n%s\n", cmd->summary);
    if (positional_nth(cmd->options, 0)) {
        printf("\nArguments:\n");
        print_option_lines(cmd->options, true);
    }
    bool any_option = false;
    for (const cli_option *o = cmd->options; o->name; o++)
        any_option |= o->name[0] == '-';
    if (any_option) {
        printf("\nOptions:\n");
        print_option_lines(cmd->options, false);
    }
    if (cmd->details)
        printf("\n%s", cmd->details);
    printf("\nGlobal options: --url URL, --publish URL, --json, --timeout-ms N,\n"
           "--consumer NAME, --retries N (see 'tally --help').\n\n%s", help_exit);
}

/* ---- output: tables and JSON ---- */

/* An aligned text table: every cell a malloc'd string. */
typedef struct cli_table {
    const char *const *titles;
    size_t columns, rows, capacity;
    char **cells;
} cli_table;

static void table_init(cli_table *t, const char *const *titles, size_t columns)
{
    assert(columns >= 1 && columns <= CLI_TABLE_COLUMNS_MAX);
    memset(t, 0, sizeof(*t));
    t->titles = titles;
    t->columns = columns;
}

/* Add one row of t->columns printf-formatted cells, separated by SEP in fmt.
 * Control characters in the cells (from keys, subjects...) print as '?'. */
static void table_add(cli_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void table_add(cli_table *t, const char *fmt, ...)
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

static void table_print_free(cli_table *t)
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
static void json_emit(json_t *o)
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

/* JSON integers are signed 64-bit: larger values (account ids) become strings. */
static json_t *json_u64(uint64_t v)
{
    if (v <= INT64_MAX)
        return json_integer((json_int_t)v);
    char text[24];
    snprintf(text, sizeof(text), "%" PRIu64, v);
    return json_string(text);
}

static json_t *json_time(int64_t ms)
{
    char text[40];
    time_format(ms, text);
    return json_string(text);
}

static json_t *json_tid(const tally_uuid *id)
{
    char hex[33];
    tid_format(id, hex);
    return json_string(hex);
}

static const char *flags_text(uint16_t flags)
{
    bool debits = flags & TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS;
    bool credits = flags & TALLY_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS;
    return debits && credits ? "both"
           : debits          ? "debits<=credits"
           : credits         ? "credits<=debits"
                             : "-";
}

static void time_text(int64_t ms, char out[40])
{
    if (ms)
        time_format(ms, out);
    else
        snprintf(out, 40, "-");
}

/* ---- write results ---- */

/* The key of a write: --key, else a new UUIDv7. */
static int key_prepare(cli *c)
{
    if (c->v[SLOT_KEY].set) {
        snprintf(c->key, sizeof(c->key), "%s", c->v[SLOT_KEY].text);
        c->key_given = true;
        return CLI_EXIT_OK;
    }
    tally_uuid key;
    if (tally_uuid_v7(&key) != TALLY_ok) {
        fputs("tally: cannot generate a key (no randomness); pass --key\n", stderr);
        return CLI_EXIT_REJECTED;
    }
    char text[37];
    tally_uuid_format(&key, text);
    snprintf(c->key, sizeof(c->key), "%s", text);
    return CLI_EXIT_OK;
}

/* Tell a person what failed and, for a write, how to retry it. */
static void explain_failure(const cli *c, const char *what, int code, bool write)
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

static void write_human(const cli *c, int code, const tally_result *r, const tally_uuid *tid)
{
    printf("%-12s %s\n", "code", tally_strerror(code));
    printf("%-12s %s\n", "replayed", r->replayed ? "yes" : "no");
    if (r->seq)
        printf("%-12s %" PRIu64 "\n", "seq", r->seq);
    else
        printf("%-12s -\n", "seq");
    printf("%-12s %" PRIu32 "\n", "events", r->events);
    printf("%-12s %s\n", "key", c->key);
    if (tid) {
        char hex[33];
        tid_format(tid, hex);
        printf("%-12s %s\n", "transfer_id", hex);
    }
}

/* Print the outcome of a write (tid: the transfer it is about, or NULL) and
 * return the exit code. */
static int write_report(cli *c, const char *what, int rc, const tally_result *r,
                        const tally_uuid *tid)
{
    int code = rc != TALLY_ok ? rc : r->code;
    if (!c->key_given && !c->json)
        fprintf(stderr, "tally: key %s (repeat with --key %s to retry)\n", c->key, c->key);
    if (c->json) {
        json_t *o = json_pack("{s:s, s:b, s:o?, s:I, s:s}", "code", tally_strerror(code),
                              "replayed", (int)r->replayed, "seq",
                              r->seq ? json_u64(r->seq) : NULL, "events", (json_int_t)r->events,
                              "key", c->key);
        if (o && tid)
            json_object_set_new(o, "transfer_id", json_tid(tid));
        json_emit(o);
    } else if (!is_transport_fault(code) && code != TALLY_invalid_argument) {
        write_human(c, code, r, tid);
    }
    if (code != TALLY_ok && !c->json)
        explain_failure(c, what, code, true);
    return exit_code_of(code);
}

/* Print a failed read and return the exit code. */
static int read_failure(const cli *c, const char *what, int rc)
{
    if (c->json)
        json_emit(json_pack("{s:s}", "code", tally_strerror(rc)));
    else
        explain_failure(c, what, rc, false);
    return exit_code_of(rc);
}

/* ---- accounts ---- */

static int run_account_open(cli *c)
{
    tally_account_open_args a = {.id = c->v[SLOT_ACCOUNT].u,
                                 .ledger = (uint32_t)value_or(c, SLOT_LEDGER, 1),
                                 .code = (uint16_t)value_or(c, SLOT_CODE, 1)};
    if (c->v[SLOT_DEBITS_LIMITED].set)
        a.flags |= TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS;
    if (c->v[SLOT_CREDITS_LIMITED].set)
        a.flags |= TALLY_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS;
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_account_open(c->client, c->key, &a, &r);
    return write_report(c, "account open", rc, &r, NULL);
}

static json_t *account_json(const tally_account *a)
{
    return json_pack("{s:o, s:I, s:I, s:I, s:b, s:b, s:I, s:I, s:I, s:I, s:o, s:o}", "id",
                     json_u64(a->id), "ledger", (json_int_t)a->ledger, "code", (json_int_t)a->code,
                     "flags", (json_int_t)a->flags, "debits_must_not_exceed_credits",
                     (int)((a->flags & TALLY_ACCOUNT_DEBITS_MUST_NOT_EXCEED_CREDITS) != 0),
                     "credits_must_not_exceed_debits",
                     (int)((a->flags & TALLY_ACCOUNT_CREDITS_MUST_NOT_EXCEED_DEBITS) != 0),
                     "debits_posted", (json_int_t)a->debits_posted, "credits_posted",
                     (json_int_t)a->credits_posted, "debits_pending", (json_int_t)a->debits_pending,
                     "credits_pending", (json_int_t)a->credits_pending, "version",
                     json_u64(a->version), "created_seq", json_u64(a->created_seq));
}

static int run_account_get(cli *c)
{
    static const char *const titles[] = {"ID",             "LEDGER",         "CODE",
                                         "FLAGS",          "DEBITS_POSTED",  "CREDITS_POSTED",
                                         "DEBITS_PENDING", "CREDITS_PENDING", "VERSION"};
    tally_account a;
    memset(&a, 0, sizeof(a));
    int rc = tally_account_get(c->client, c->v[SLOT_ACCOUNT].u, &a);
    if (rc != TALLY_ok) {
        char what[48];
        snprintf(what, sizeof(what), "account %" PRIu64, c->v[SLOT_ACCOUNT].u);
        return read_failure(c, what, rc);
    }
    if (c->json) {
        json_emit(account_json(&a));
        return CLI_EXIT_OK;
    }
    cli_table t;
    table_init(&t, titles, 9);
    table_add(&t,
              "%" PRIu64 SEP "%" PRIu32 SEP "%u" SEP "%s" SEP "%" PRId64 SEP "%" PRId64 SEP
              "%" PRId64 SEP "%" PRId64 SEP "%" PRIu64,
              a.id, a.ledger, (unsigned)a.code, flags_text(a.flags), a.debits_posted,
              a.credits_posted, a.debits_pending, a.credits_pending, a.version);
    table_print_free(&t);
    return CLI_EXIT_OK;
}

static json_t *transfer_json(const tally_transfer_info *x)
{
    json_t *o = json_pack(
        "{s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:b, s:s, s:I, s:o?, s:I, s:o, s:o, s:o, s:o?}", "id",
        json_tid(&x->id), "debit_account_id", json_u64(x->debit_account_id), "credit_account_id",
        json_u64(x->credit_account_id), "amount", (json_int_t)x->amount, "ledger",
        (json_int_t)x->ledger, "code", (json_int_t)x->code, "flags", (json_int_t)x->flags,
        "pending", (int)((x->flags & TALLY_TRANSFER_PENDING) != 0), "state", x->state, "timeout_s",
        (json_int_t)x->timeout_s, "expires_at",
        x->expires_at_ms ? json_time(x->expires_at_ms) : NULL, "posted_amount",
        (json_int_t)x->posted_amount, "version", json_u64(x->version), "created_seq",
        json_u64(x->created_seq), "resolved_seq", json_u64(x->resolved_seq), "created",
        x->created_ms ? json_time(x->created_ms) : NULL);
    return o;
}

static json_t *history_json(const tally_history_entry *e)
{
    return json_pack("{s:o, s:s, s:o, s:I, s:o, s:o}", "seq", json_u64(e->seq), "type", e->type,
                     "time", json_time(e->time_ms), "time_ms", (json_int_t)e->time_ms, "transfer",
                     transfer_json(&e->transfer), "account", account_json(&e->account));
}

static void history_table(const tally_history_entry *entries, size_t count)
{
    static const char *const titles[] = {
        "SEQ",    "TIME",  "TYPE",          "TRANSFER",       "DEBIT",          "CREDIT",
        "AMOUNT", "STATE", "DEBITS_POSTED", "CREDITS_POSTED", "DEBITS_PENDING", "CREDITS_PENDING"};
    cli_table t;
    table_init(&t, titles, 12);
    for (size_t i = 0; i < count; i++) {
        const tally_history_entry *e = &entries[i];
        char when[40], hex[33];
        time_text(e->time_ms, when);
        tid_format(&e->transfer.id, hex);
        table_add(&t,
                  "%" PRIu64 SEP "%s" SEP "%s" SEP "%s" SEP "%" PRIu64 SEP "%" PRIu64 SEP
                  "%" PRId64 SEP "%s" SEP "%" PRId64 SEP "%" PRId64 SEP "%" PRId64 SEP "%" PRId64,
                  e->seq, when, e->type, hex, e->transfer.debit_account_id,
                  e->transfer.credit_account_id, e->transfer.amount, e->transfer.state,
                  e->account.debits_posted, e->account.credits_posted, e->account.debits_pending,
                  e->account.credits_pending);
    }
    table_print_free(&t);
}

static int run_account_history(cli *c)
{
    uint64_t id = c->v[SLOT_ACCOUNT].u;
    uint32_t limit = (uint32_t)value_or(c, SLOT_LIMIT, TALLY_HISTORY_ENTRIES_DEFAULT);
    bool reverse = c->v[SLOT_REVERSE].set;
    tally_history_entry *entries = calloc(limit, sizeof(*entries));
    if (!entries)
        cli_out_of_memory();
    size_t count = 0;
    uint64_t next = 0;
    int rc = tally_account_history(c->client, id, value_or(c, SLOT_AFTER, 0), limit, reverse,
                                   entries, limit, &count, &next);
    if (rc != TALLY_ok) {
        free(entries);
        char what[48];
        snprintf(what, sizeof(what), "history of account %" PRIu64, id);
        return read_failure(c, what, rc);
    }
    count = count < limit ? count : limit;
    if (c->json) {
        for (size_t i = 0; i < count; i++)
            json_emit(history_json(&entries[i]));
    } else {
        history_table(entries, count);
        if (next)
            fprintf(stderr,
                    "tally: more: tally account history %" PRIu64 " --after %" PRIu64 "%s\n", id,
                    next, reverse ? " --reverse" : "");
    }
    free(entries);
    return CLI_EXIT_OK;
}

/* ---- transfers and holds ---- */

/* The id and key of a transfer (the rule of `tally --help`): --id or the
 * id derived from the key; --key, or "transfer-<id>" with --id, or new. */
static int transfer_identify(cli *c, tally_uuid *id)
{
    if (c->v[SLOT_ID].set && !c->v[SLOT_KEY].set) {
        char hex[33];
        *id = c->v[SLOT_ID].id;
        tid_format(id, hex);
        snprintf(c->key, sizeof(c->key), "transfer-%s", hex);
        return CLI_EXIT_OK;
    }
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (c->v[SLOT_ID].set)
        *id = c->v[SLOT_ID].id;
    else
        tally_uuid_from_key(c->consumer, c->key, id);
    return CLI_EXIT_OK;
}

static int run_transfer(cli *c)
{
    if (c->v[SLOT_TIMEOUT_S].set && !c->v[SLOT_PENDING].set)
        return usage_error(c, "--timeout-s is for holds: add --pending");
    tally_transfer_args t = {.debit_account_id = c->v[SLOT_DEBIT].u,
                             .credit_account_id = c->v[SLOT_CREDIT].u,
                             .amount = c->v[SLOT_AMOUNT].i,
                             .ledger = (uint32_t)value_or(c, SLOT_LEDGER, 1),
                             .code = (uint16_t)value_or(c, SLOT_CODE, 1)};
    if (c->v[SLOT_PENDING].set) {
        t.flags = TALLY_TRANSFER_PENDING;
        t.timeout_s = (uint32_t)value_or(c, SLOT_TIMEOUT_S, 0);
    }
    int rc = transfer_identify(c, &t.id);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_transfer(c->client, c->key, &t, &r);
    return write_report(c, "transfer", rc, &r, &t.id);
}

static int run_post(cli *c)
{
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    int64_t amount = c->v[SLOT_AMOUNT].set ? c->v[SLOT_AMOUNT].i : 0; /* 0: all of it */
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_post(c->client, c->key, &c->v[SLOT_TID].id, amount, &r);
    return write_report(c, "post", rc, &r, &c->v[SLOT_TID].id);
}

static int run_void(cli *c)
{
    int rc = key_prepare(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = tally_void(c->client, c->key, &c->v[SLOT_TID].id, &r);
    return write_report(c, "void", rc, &r, &c->v[SLOT_TID].id);
}

/* ---- entitlements ---- */

static int entitlement_prepare(cli *c, tally_entitlement_args *e)
{
    if (c->v[SLOT_UNTIL].set && c->v[SLOT_FOR].set)
        return usage_error(c, "--until and --for are mutually exclusive");
    memset(e, 0, sizeof(*e));
    e->subject = c->v[SLOT_SUBJECT].text;
    e->feature = c->v[SLOT_FEATURE].text;
    e->valid_until_ms = c->v[SLOT_UNTIL].set ? c->v[SLOT_UNTIL].i : 0;
    e->duration_ms = c->v[SLOT_FOR].set ? c->v[SLOT_FOR].i : 0;
    e->has_source_order = c->v[SLOT_SOURCE_ORDER].set;
    e->source_order = c->v[SLOT_SOURCE_ORDER].u;
    return key_prepare(c);
}

typedef int (*entitlement_write_fn)(tally_client *, const char *, const tally_entitlement_args *,
                                    tally_result *);

static int entitlement_write(cli *c, const char *what, entitlement_write_fn fn)
{
    tally_entitlement_args e;
    int rc = entitlement_prepare(c, &e);
    if (rc != CLI_EXIT_OK)
        return rc;
    tally_result r;
    memset(&r, 0, sizeof(r));
    rc = fn(c->client, c->key, &e, &r);
    return write_report(c, what, rc, &r, NULL);
}

static int run_grant(cli *c) { return entitlement_write(c, "grant", tally_grant); }

static int run_extend(cli *c)
{
    if (!c->v[SLOT_UNTIL].set && !c->v[SLOT_FOR].set)
        return usage_error(c, "missing --until RFC3339 (or --for DURATION)");
    return entitlement_write(c, "extend", tally_extend);
}

static int run_revoke(cli *c) { return entitlement_write(c, "revoke", tally_revoke); }

static json_t *entitlement_json(const tally_entitlement *e)
{
    bool until = !e->lifetime;
    return json_pack("{s:s, s:s, s:s, s:b, s:o?, s:o?, s:o, s:o?, s:o?, s:o?}", "subject",
                     e->subject, "feature", e->feature, "state", e->state, "lifetime",
                     (int)e->lifetime, "valid_until", until ? json_time(e->valid_until_ms) : NULL,
                     "valid_until_ms", until ? json_integer(e->valid_until_ms) : NULL, "version",
                     json_u64(e->version), "source_order",
                     e->has_source_order ? json_u64(e->source_order) : NULL, "granted",
                     e->granted_ms ? json_time(e->granted_ms) : NULL, "updated",
                     e->updated_ms ? json_time(e->updated_ms) : NULL);
}

static void entitlements_print(const cli *c, const tally_entitlement *list, size_t count)
{
    static const char *const titles[] = {"FEATURE",      "STATE",   "VALID_UNTIL", "VERSION",
                                         "SOURCE_ORDER", "GRANTED", "UPDATED"};
    if (c->json) {
        json_t *array = json_array();
        for (size_t i = 0; array && i < count; i++)
            if (json_array_append_new(array, entitlement_json(&list[i])) != 0)
                cli_out_of_memory();
        json_emit(array);
        return;
    }
    cli_table t;
    table_init(&t, titles, 7);
    for (size_t i = 0; i < count; i++) {
        const tally_entitlement *e = &list[i];
        char until[40], granted[40], updated[40], order[24] = "-";
        if (e->lifetime)
            snprintf(until, sizeof(until), "lifetime");
        else
            time_format(e->valid_until_ms, until);
        time_text(e->granted_ms, granted);
        time_text(e->updated_ms, updated);
        if (e->has_source_order)
            snprintf(order, sizeof(order), "%" PRIu64, e->source_order);
        table_add(&t, "%s" SEP "%s" SEP "%s" SEP "%" PRIu64 SEP "%s" SEP "%s" SEP "%s", e->feature,
                  e->state, until, e->version, order, granted, updated);
    }
    table_print_free(&t);
}

static int run_entitlements(cli *c)
{
    size_t capacity = CLI_ENTITLEMENTS_FIRST, count = 0;
    tally_entitlement *list = NULL;
    int rc;
    for (;;) {
        tally_entitlement *bigger = realloc(list, capacity * sizeof(*list));
        if (!bigger)
            cli_out_of_memory();
        list = bigger;
        count = 0;
        rc = tally_entitlement_list(c->client, c->v[SLOT_SUBJECT].text, list, capacity, &count);
        if (rc != TALLY_ok || count < capacity || capacity >= CLI_ENTITLEMENTS_MAX)
            break;
        /* The list may have been cut at capacity: ask again with room for more. */
        capacity = count > capacity * 2 ? count : capacity * 2;
        capacity = capacity < CLI_ENTITLEMENTS_MAX ? capacity : CLI_ENTITLEMENTS_MAX;
    }
    if (rc == TALLY_ok)
        entitlements_print(c, list, count < capacity ? count : capacity);
    free(list);
    if (rc != TALLY_ok) {
        char what[160];
        snprintf(what, sizeof(what), "entitlements of %s", c->v[SLOT_SUBJECT].text);
        return read_failure(c, what, rc);
    }
    return CLI_EXIT_OK;
}

/* ---- log and stats ---- */

/* The entity of an event: {kind, id} for accounts and transfers, {kind,
 * subject, feature} for entitlements. */
static json_t *entity_json(const tally_event *e)
{
    if (strcmp(e->entity_kind, "account") == 0)
        return json_pack("{s:s, s:o}", "kind", e->entity_kind, "id", json_u64(e->account_id));
    if (strcmp(e->entity_kind, "transfer") == 0)
        return json_pack("{s:s, s:o}", "kind", e->entity_kind, "id", json_tid(&e->transfer_id));
    return json_pack("{s:s, s:s, s:s}", "kind", e->entity_kind, "subject", e->subject, "feature",
                     e->feature);
}

static json_t *event_json(const tally_event *e)
{
    char id[37];
    tally_uuid_format(&e->id, id);
    return json_pack("{s:o, s:s, s:s, s:s, s:o, s:o, s:o, s:I, s:s?, s:s?}", "seq",
                     json_u64(e->seq), "event_id", id, "type", e->type, "entity_kind",
                     e->entity_kind, "entity", entity_json(e), "entity_version",
                     json_u64(e->entity_version), "time", json_time(e->time_ms), "time_ms",
                     (json_int_t)e->time_ms, "consumer", e->consumer[0] ? e->consumer : NULL,
                     "key", e->key[0] ? e->key : NULL);
}

static void log_page_output(const cli *c, cli_table *t, const tally_event *events, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const tally_event *e = &events[i];
        if (c->json) {
            json_emit(event_json(e));
            continue;
        }
        char when[40];
        time_text(e->time_ms, when);
        table_add(t, "%" PRIu64 SEP "%s" SEP "%s" SEP "%s" SEP "%" PRIu64 SEP "%s" SEP "%s", e->seq,
                  when, e->type, e->entity_kind, e->entity_version,
                  e->consumer[0] ? e->consumer : "-", e->key[0] ? e->key : "-");
    }
}

static int run_log(cli *c)
{
    static const char *const titles[] = {"SEQ", "TIME", "TYPE", "ENTITY", "VERSION", "CONSUMER",
                                         "KEY"};
    uint64_t from = value_or(c, SLOT_FROM, 1), head = 0;
    uint64_t remaining = value_or(c, SLOT_LIMIT, CLI_LOG_LIMIT_DEFAULT);
    tally_event *events = calloc(TALLY_LOG_READ_EVENTS_MAX, sizeof(*events));
    if (!events)
        cli_out_of_memory();
    cli_table t;
    table_init(&t, titles, 7);
    int rc = TALLY_ok;
    from = from ? from : 1;
    while (remaining > 0) {
        uint32_t page = remaining < TALLY_LOG_READ_EVENTS_MAX ? (uint32_t)remaining
                                                              : TALLY_LOG_READ_EVENTS_MAX;
        size_t count = 0;
        rc = tally_log_read(c->client, from, page, 0, events, page, &count, &head);
        if (rc != TALLY_ok)
            break;
        count = count < page ? count : page;
        log_page_output(c, &t, events, count);
        if (count > 0)
            from = events[count - 1].seq + 1;
        tally_events_release(events, count);
        if (count == 0)
            break;
        remaining -= count;
    }
    free(events);
    if (!c->json)
        table_print_free(&t);
    else
        free(t.cells);
    if (rc != TALLY_ok)
        return read_failure(c, "log", rc);
    if (!c->json)
        fprintf(stderr, "tally: head %" PRIu64 "\n", head);
    return CLI_EXIT_OK;
}

/* ---- tail: the live stream or a durable subscriber ---- */

/* Set by SIGINT/SIGTERM; a subscriber's run is also told to stop. */
static volatile sig_atomic_t tail_interrupted;
static tally_subscriber *tail_subscriber;

static void tail_on_signal(int sig)
{
    (void)sig;
    tail_interrupted = 1;
    tally_subscriber_stop(tail_subscriber); /* an atomic store: async-signal-safe */
}

static void tail_signals_catch(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = tail_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* "account 7", "transfer <32 hex>", "entitlement alice/pro". */
static void entity_text(const tally_event *e, char *out, size_t size)
{
    char hex[33];
    if (strcmp(e->entity_kind, "account") == 0) {
        snprintf(out, size, "account %" PRIu64, e->account_id);
    } else if (strcmp(e->entity_kind, "transfer") == 0) {
        tid_format(&e->transfer_id, hex);
        snprintf(out, size, "transfer %s", hex);
    } else {
        snprintf(out, size, "%s %s/%s", e->entity_kind, e->subject, e->feature);
    }
}

/* One line per event: aligned columns (control characters as '?'), or one
 * JSON object. d: the delivery to a subscriber, NULL for the live stream.
 * false when stdout cannot be written. */
static bool tail_print(const cli *c, const tally_event *e, const tally_delivery *d)
{
    if (c->json) {
        json_t *o = event_json(e);
        if (o && d)
            json_object_update_new(o, json_pack("{s:I, s:b}", "attempt", (json_int_t)d->attempt,
                                                "replay", (int)d->replay));
        json_emit(o);
    } else {
        char when[40], entity[240], line[CLI_TAIL_LINE_BYTES_MAX];
        time_text(e->time_ms, when);
        entity_text(e, entity, sizeof(entity));
        int n = snprintf(line, sizeof(line), "%-8" PRIu64 " %-24s %-22s %-42s %-7" PRIu64,
                         e->seq, when, e->type, entity, e->entity_version);
        if (d && n > 0 && (size_t)n < sizeof(line))
            snprintf(line + n, sizeof(line) - (size_t)n, "  %u%s", d->attempt,
                     d->replay ? " (replay)" : "");
        for (char *p = line; *p; p++)
            if ((unsigned char)*p < 0x20 || *p == 0x7f)
                *p = '?';
        puts(line);
    }
    return fflush(stdout) == 0 && !ferror(stdout);
}

static void tail_header(const cli *c, bool subscriber)
{
    if (!c->json)
        printf("%-8s %-24s %-22s %-42s %-7s%s\n", "SEQ", "TIME", "TYPE", "ENTITY", "VERSION",
               subscriber ? "  ATTEMPT" : "");
}

/* The live stream: no cursor kept anywhere. */
static int tail_stream(cli *c, uint64_t from, uint64_t count)
{
    tally_stream *s = NULL;
    int rc = tally_stream_open(c->client, c->publish, from, NULL, &s);
    if (rc == TALLY_invalid_argument)
        return usage_error(c, "bad --publish URL '%s'", c->publish);
    if (rc != TALLY_ok)
        return read_failure(c, "tail", rc);
    tail_header(c, false);
    unsigned failures = 0;
    for (uint64_t n = 0; !tail_interrupted && (count == 0 || n < count);) {
        tally_event e;
        rc = tally_stream_next(s, &e, CLI_TAIL_WAIT_MS);
        bool away = is_transport_fault(rc) && ++failures <= CLI_TAIL_FAILURES_MAX;
        if (rc == TALLY_timed_out || away) {
            rc = TALLY_ok; /* nothing yet, or the server is away for now: go on */
            continue;
        }
        if (rc != TALLY_ok)
            break;
        failures = 0;
        bool written = tail_print(c, &e, NULL);
        tally_events_release(&e, 1);
        if (!written)
            break; /* main reports the output error */
        n++;
    }
    tally_stream_close(s);
    return rc == TALLY_ok ? CLI_EXIT_OK : read_failure(c, "tail", rc);
}

static tally_verdict tail_handle(const tally_delivery *d, tally_answer *answer, void *arg)
{
    if (tail_print(arg, &d->event, d))
        return TALLY_DONE;
    snprintf(answer->error, sizeof(answer->error), "tally tail could not write its output");
    tally_subscriber_stop(tail_subscriber);
    return TALLY_RETRY; /* not shown: not acknowledged */
}

/* The options to open the subscriber with: NULL to use an existing one as
 * it is (the start options only matter to a new one), else o. */
static const tally_subscriber_options *tail_subscriber_options(const cli *c,
                                                               tally_subscriber_options *o)
{
    memset(o, 0, sizeof(*o));
    if (c->v[SLOT_FROM].set) {
        o->start = TALLY_START_SEQ;
        o->from_seq = c->v[SLOT_FROM].u;
    } else if (c->v[SLOT_FROM_NOW].set) {
        o->start = TALLY_START_NOW;
    } else if (c->v[SLOT_FROM_TIME].set) {
        o->start = TALLY_START_TIME;
        o->from_time_ms = c->v[SLOT_FROM_TIME].i;
    }
    o->max_deliver = (uint32_t)value_or(c, SLOT_MAX_DELIVER, 0);
    o->ack_wait_ms = (uint32_t)value_or(c, SLOT_ACK_WAIT_MS, 0);
    bool settings = c->v[SLOT_MAX_DELIVER].set || c->v[SLOT_ACK_WAIT_MS].set;
    tally_subscriber_info existing;
    if (!settings && tally_subscriber_get(c->client, c->v[SLOT_SUBSCRIBER].text, &existing) ==
                         TALLY_ok)
        return NULL;
    return o; /* new (or settings to check): created with them, identical is fine */
}

/* A durable subscriber: events are acknowledged once printed. */
static int tail_durable(cli *c, uint64_t count)
{
    const char *name = c->v[SLOT_SUBSCRIBER].text;
    tally_subscriber_options o;
    char what[96];
    snprintf(what, sizeof(what), "subscriber %s", name);
    int rc = tally_subscriber_open(c->client, name, tail_subscriber_options(c, &o),
                                   &tail_subscriber);
    if (rc == TALLY_subscriber_exists_with_different_config)
        fprintf(stderr, "tally: subscriber %s exists with other settings (see `tally "
                        "subscribers`); leave out --max-deliver and --ack-wait-ms, or delete it\n",
                name);
    if (rc != TALLY_ok)
        return read_failure(c, what, rc);
    if (tail_interrupted)
        tally_subscriber_stop(tail_subscriber);
    tail_header(c, true);
    tally_run_options ro = {.max_events = count, .wait_ms = CLI_TAIL_WAIT_MS,
                            .failures_max = CLI_TAIL_FAILURES_MAX};
    rc = tally_subscriber_run(tail_subscriber, &ro, tail_handle, c);
    tally_subscriber *s = tail_subscriber;
    tail_subscriber = NULL;
    tally_subscriber_close(s);
    return rc == TALLY_ok ? CLI_EXIT_OK : read_failure(c, what, rc);
}

static int run_tail(cli *c)
{
    int starts = c->v[SLOT_FROM].set + c->v[SLOT_FROM_START].set + c->v[SLOT_FROM_NOW].set +
                 c->v[SLOT_FROM_TIME].set;
    if (starts > 1)
        return usage_error(c, "--from, --from-start, --from-now and --from-time are mutually "
                              "exclusive");
    bool durable = c->v[SLOT_SUBSCRIBER].set;
    if (!durable && (c->v[SLOT_FROM_TIME].set || c->v[SLOT_MAX_DELIVER].set ||
                     c->v[SLOT_ACK_WAIT_MS].set))
        return usage_error(c, "--from-time, --max-deliver and --ack-wait-ms need --subscriber");
    tail_signals_catch();
    uint64_t count = value_or(c, SLOT_EVENTS, 0);
    if (durable)
        return tail_durable(c, count);
    uint64_t from = c->v[SLOT_FROM].set         ? c->v[SLOT_FROM].u
                    : c->v[SLOT_FROM_START].set ? 1
                                                : TALLY_STREAM_FROM_NOW;
    return tail_stream(c, from, count);
}

/* ---- subscribers and dead letters ---- */

static json_t *subscriber_json(const tally_subscriber_info *i)
{
    json_t *backoff = json_array();
    for (uint32_t k = 0; backoff && k < i->backoff_count; k++)
        if (json_array_append_new(backoff, json_integer(i->backoff_ms[k])) != 0)
            cli_out_of_memory();
    return json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:o, s:I, s:o?, "
                     "s:o?}",
                     "name", i->name, "ack_floor", json_u64(i->ack_floor), "delivered_seq",
                     json_u64(i->delivered_seq), "pending", json_u64(i->pending), "in_flight",
                     json_u64(i->in_flight), "oldest_unacked_age_s",
                     json_u64(i->oldest_unacked_age_s), "redelivered", json_u64(i->redelivered),
                     "dead_letters", json_u64(i->dead_letters), "replaying",
                     json_u64(i->replaying), "max_deliver", (json_int_t)i->max_deliver,
                     "ack_wait_ms", (json_int_t)i->ack_wait_ms, "backoff_ms", backoff,
                     "max_ack_pending", (json_int_t)i->max_ack_pending, "created",
                     i->created_ms ? json_time(i->created_ms) : NULL, "updated",
                     i->updated_ms ? json_time(i->updated_ms) : NULL);
}

static int run_subscribers(cli *c)
{
    static const char *const titles[] = {"NAME",        "ACK_FLOOR",   "PENDING",
                                         "IN_FLIGHT",   "OLDEST_UNACKED_AGE_S",
                                         "REDELIVERED", "DEAD_LETTERS"};
    static tally_subscriber_info list[TALLY_SUBSCRIBERS_MAX];
    size_t n = 0;
    int rc = tally_subscriber_list(c->client, list, TALLY_SUBSCRIBERS_MAX, &n);
    if (rc != TALLY_ok)
        return read_failure(c, "subscribers", rc);
    cli_table t;
    table_init(&t, titles, 7);
    for (size_t k = 0; k < n; k++) {
        const tally_subscriber_info *i = &list[k];
        if (c->json)
            json_emit(subscriber_json(i));
        else
            table_add(&t,
                      "%s" SEP "%" PRIu64 SEP "%" PRIu64 SEP "%" PRIu64 SEP "%" PRIu64 SEP
                      "%" PRIu64 SEP "%" PRIu64,
                      i->name, i->ack_floor, i->pending, i->in_flight, i->oldest_unacked_age_s,
                      i->redelivered, i->dead_letters);
    }
    if (!c->json)
        table_print_free(&t);
    return CLI_EXIT_OK;
}

/* What a subscriber op acts on, for messages: "dlq of NAME". */
static const char *about(const cli *c, const char *what, char *out, size_t size)
{
    snprintf(out, size, "%s %s", what, c->v[SLOT_NAME].text);
    return out;
}

static int run_subscriber_delete(cli *c)
{
    char what[96];
    int rc = tally_subscriber_delete(c->client, c->v[SLOT_NAME].text);
    if (rc != TALLY_ok)
        return read_failure(c, about(c, "delete subscriber", what, sizeof(what)), rc);
    if (c->json)
        json_emit(json_pack("{s:s, s:b, s:s}", "code", "ok", "deleted", 1, "name",
                            c->v[SLOT_NAME].text));
    else
        printf("deleted subscriber %s\n", c->v[SLOT_NAME].text);
    return CLI_EXIT_OK;
}

static json_t *dead_letter_json(const tally_dead_letter *l)
{
    char id[37];
    tally_uuid_format(&l->event_id, id);
    return json_pack("{s:o, s:I, s:s, s:o, s:I, s:b, s:s?, s:s?}", "seq", json_u64(l->seq),
                     "attempts", (json_int_t)l->attempts, "error", l->error, "parked",
                     json_time(l->parked_ms), "parked_ms", (json_int_t)l->parked_ms, "replaying",
                     (int)l->replaying, "event_id", l->type[0] ? id : NULL, "type",
                     l->type[0] ? l->type : NULL);
}

static void dead_letters_output(const cli *c, cli_table *t, const tally_dead_letter *list,
                                size_t count)
{
    for (size_t k = 0; k < count; k++) {
        const tally_dead_letter *l = &list[k];
        char parked[40];
        if (c->json) {
            json_emit(dead_letter_json(l));
            continue;
        }
        time_text(l->parked_ms, parked);
        table_add(t, "%" PRIu64 SEP "%u" SEP "%s" SEP "%s" SEP "%s" SEP "%s", l->seq, l->attempts,
                  l->type[0] ? l->type : "-", parked, l->replaying ? "yes" : "no", l->error);
    }
}

static int run_dlq_list(cli *c)
{
    static const char *const titles[] = {"SEQ", "ATTEMPTS", "TYPE", "PARKED", "REPLAYING",
                                         "ERROR"};
    uint64_t after = value_or(c, SLOT_AFTER, 0), next = 0;
    uint64_t remaining = value_or(c, SLOT_LIMIT, CLI_LOG_LIMIT_DEFAULT);
    tally_dead_letter *page = calloc(TALLY_DLQ_LIST_ENTRIES_MAX, sizeof(*page));
    if (!page)
        cli_out_of_memory();
    cli_table t;
    table_init(&t, titles, 6);
    int rc = TALLY_ok;
    while (remaining > 0) {
        uint32_t limit = remaining < TALLY_DLQ_LIST_ENTRIES_MAX ? (uint32_t)remaining
                                                                : TALLY_DLQ_LIST_ENTRIES_MAX;
        size_t count = 0;
        rc = tally_dlq_list(c->client, c->v[SLOT_NAME].text, after, limit, page, limit, &count,
                            &next);
        if (rc != TALLY_ok)
            break;
        dead_letters_output(c, &t, page, count);
        remaining -= count < remaining ? count : remaining;
        if (next == 0 || count == 0)
            break;
        after = next;
    }
    free(page);
    if (!c->json && (rc == TALLY_ok || t.rows > 0))
        table_print_free(&t); /* what was read, also before a failure */
    else
        free(t.cells);
    char what[96];
    if (rc != TALLY_ok)
        return read_failure(c, about(c, "dead letters of", what, sizeof(what)), rc);
    if (!c->json && remaining == 0 && next != 0)
        fprintf(stderr, "tally: more: tally dlq list %s --after %" PRIu64 "\n",
                c->v[SLOT_NAME].text, after);
    return CLI_EXIT_OK;
}

static int run_dlq_replay(cli *c)
{
    uint64_t replaying = 0;
    char what[96];
    int rc = tally_dlq_replay(c->client, c->v[SLOT_NAME].text, value_or(c, SLOT_SEQ, 0),
                              &replaying);
    if (rc != TALLY_ok)
        return read_failure(c, about(c, "replay dead letters of", what, sizeof(what)), rc);
    if (c->json)
        json_emit(json_pack("{s:s, s:o}", "code", "ok", "replaying", json_u64(replaying)));
    else
        printf("replaying %" PRIu64 " dead letter%s of %s: delivered again on the next fetch\n",
               replaying, replaying == 1 ? "" : "s", c->v[SLOT_NAME].text);
    return CLI_EXIT_OK;
}

static int run_dlq_discard(cli *c)
{
    char what[96];
    int rc = tally_dlq_discard(c->client, c->v[SLOT_NAME].text, c->v[SLOT_SEQ].u);
    if (rc != TALLY_ok)
        return read_failure(c, about(c, "discard a dead letter of", what, sizeof(what)), rc);
    if (c->json)
        json_emit(json_pack("{s:s, s:b, s:o}", "code", "ok", "discarded", 1, "seq",
                            json_u64(c->v[SLOT_SEQ].u)));
    else
        printf("discarded dead letter %" PRIu64 " of %s\n", c->v[SLOT_SEQ].u,
               c->v[SLOT_NAME].text);
    return CLI_EXIT_OK;
}

/* stats --json: "subscribers" becomes the array of their metrics. */
static int stats_subscribers_add(const cli *c, json_t *o, uint64_t count)
{
    static tally_subscriber_info list[TALLY_SUBSCRIBERS_MAX];
    size_t n = 0;
    int rc = count ? tally_stats_subscribers(c->client, list, TALLY_SUBSCRIBERS_MAX, &n)
                   : TALLY_ok;
    json_t *array = json_array();
    for (size_t k = 0; rc == TALLY_ok && array && k < n; k++)
        if (json_array_append_new(array, subscriber_json(&list[k])) != 0)
            cli_out_of_memory();
    if (!array || json_object_set_new(o, "subscribers", array) != 0)
        cli_out_of_memory();
    return rc;
}

static int run_stats(cli *c)
{
    static const char *const titles[] = {"NAME", "VALUE"};
    tally_stats s;
    memset(&s, 0, sizeof(s));
    int rc = tally_stats_get(c->client, &s);
    if (rc != TALLY_ok)
        return read_failure(c, "stats", rc);
    const struct { const char *name; uint64_t value; } rows[] = {
        {"head_seq", s.head_seq},         {"first_seq", s.first_seq},
        {"accounts", s.accounts},         {"transfers", s.transfers},
        {"entitlements", s.entitlements}, {"inbox", s.inbox},
        {"events", s.events},             {"map_used_bytes", s.map_used_bytes},
        {"map_size_bytes", s.map_size_bytes}, {"inbox_oldest_age_s", s.inbox_oldest_age_s},
        {"log_floor", s.log_floor}, {"subscribers", s.subscribers}};
    size_t n = sizeof(rows) / sizeof(rows[0]); /* JSON: the last row becomes a list */
    json_t *o = c->json ? json_object() : NULL;
    cli_table t;
    table_init(&t, titles, 2);
    for (size_t i = 0; i < n; i++) {
        if (o && i + 1 < n && json_object_set_new(o, rows[i].name, json_u64(rows[i].value)) != 0)
            cli_out_of_memory();
        if (!o)
            table_add(&t, "%s" SEP "%" PRIu64, rows[i].name, rows[i].value);
    }
    if (o) /* --json: "subscribers" is the list of their metrics, as stats reports them */
        rc = stats_subscribers_add(c, o, s.subscribers);
    if (rc != TALLY_ok) {
        json_decref(o);
        return read_failure(c, "stats", rc);
    }
    if (o)
        json_emit(o);
    else
        table_print_free(&t);
    return CLI_EXIT_OK;
}

static int run_backup(cli *c)
{
    const char *dest = c->v[SLOT_NAME].text;
    if (dest[0] != '/') {
        fprintf(stderr, "tally backup: DEST must be an absolute path on tallyd's machine\n");
        return CLI_EXIT_USAGE;
    }
    uint64_t bytes = 0;
    int rc = tally_backup(c->client, dest, &bytes);
    if (rc != TALLY_ok)
        return read_failure(c, "backup", rc);
    if (c->json)
        json_emit(json_pack("{s:s, s:s, s:o}", "code", "ok", "path", dest, "bytes",
                            json_u64(bytes)));
    else
        printf("backup written to %s (%" PRIu64 " bytes); check it with: tally-recon --data %s\n",
               dest, bytes, dest);
    return CLI_EXIT_OK;
}

/* ---- the command table ---- */

static const char details_transfer[] =
    "Without --id the transfer id is derived from the key, so repeating the command\n"
    "with the same --key is a retry (same id, same fields) and is answered\n"
    "\"replayed\"; the id is printed (transfer_id). With --id and no --key the key\n"
    "is \"transfer-<32 hex digits of the id>\", so repeating the same command is a\n"
    "retry too. A TID is 32 hex digits (dashes allowed) or a decimal number n\n"
    "(the 16-byte big-endian n). A hold (--pending) is resolved with `tally post`\n"
    "or `tally void`, or expires after --timeout-s.\n";

static const char details_write[] =
    "Without --key a new key (UUIDv7) is generated and printed; repeat the command\n"
    "with --key KEY to retry it safely: the first outcome is returned (replayed).\n";

static const char details_time[] =
    "--until takes an RFC 3339 time (2027-01-01T00:00:00Z or, with an offset and\n"
    "a fraction, 2027-01-01T09:00:00.5+02:00) or a date (midnight UTC); --for a\n"
    "duration: a number and a unit ms, s, m, h, d or w, several may follow each\n"
    "other (1d12h). A grant with neither is for life. Without --key a new key\n"
    "(UUIDv7) is generated and printed.\n";

static const char details_tail[] =
    "Without --subscriber, tail reads the live stream (tallyd's publisher, see\n"
    "--publish; what it drops is read from the log, so no event is skipped or\n"
    "shown twice) from --from SEQ, --from-start, or by default from now; nothing\n"
    "is remembered. With --subscriber NAME, tail reads as that durable subscriber:\n"
    "each event is acknowledged once printed, and the next `tail --subscriber NAME`\n"
    "continues after it (an event printed just before a crash may be printed\n"
    "again). A new subscriber starts at --from SEQ, --from-now, --from-time, or by\n"
    "default at the first event; an existing one continues where it is, and\n"
    "--max-deliver, --ack-wait-ms must match its settings or be left out (see\n"
    "`tally subscribers --json`). Without --count, tail follows until interrupted\n"
    "(Ctrl-C: exit 0). --json prints one object per event: seq, event_id, type,\n"
    "entity_kind, entity, entity_version, time, time_ms, consumer, key, and with\n"
    "--subscriber attempt and replay.\n";

static const cli_command commands[] = {
    {"account open", "Open an account.", account_open_options, run_account_open, details_write},
    {"account get", "Show an account with its balances and version.", account_get_options,
     run_account_get, NULL},
    {"account history", "Show the transfer events of an account, with its balances after each.",
     account_history_options, run_account_history,
     "--json prints one object per line: seq, type, time, transfer, account.\n"},
    {"transfer", "Move an amount from one account to another, or hold it (--pending).",
     transfer_options, run_transfer, details_transfer},
    {"post", "Post (capture) a hold, fully or partly.", post_options, run_post, details_write},
    {"void", "Void a hold.", void_options, run_void, details_write},
    {"grant", "Grant an entitlement: until a time, for a duration, or for life.", grant_options,
     run_grant, details_time},
    {"extend", "Extend an active or expired entitlement to a later end.", extend_options,
     run_extend, details_time},
    {"revoke", "Revoke an entitlement.", revoke_options, run_revoke, details_write},
    {"entitlements", "List a subject's entitlements, states evaluated now.",
     entitlements_options, run_entitlements,
     "--json prints one JSON list of objects (valid_until null for a lifetime grant).\n"},
    {"log", "Show events of the log from a seq.", log_options, run_log,
     "--json prints one object per line: seq, event_id, type, entity_kind,\n"
     "entity_version, time, consumer, key (null for events of the expiry sweep).\n"},
    {"stats", "Show the head seq, counts, inbox size, map use and subscribers.", stats_options,
     run_stats, "--json prints one object; subscribers is the list of their metrics (as in\n"
     "`tally subscribers --json`).\n"},
    {"tail", "Follow the event log: live, or as a durable subscriber that resumes.",
     tail_options, run_tail, details_tail},
    {"subscribers", "List durable subscribers: progress, backlog, redeliveries, dead letters.",
     subscribers_options, run_subscribers,
     "PENDING is head - ACK_FLOOR; OLDEST_UNACKED_AGE_S the age of the event after the\n"
     "ack floor. --json prints one object per subscriber with every metric and setting.\n"},
    {"subscriber delete", "Delete a durable subscriber with its in-flight events and dead letters.",
     subscriber_delete_options, run_subscriber_delete, NULL},
    {"dlq list", "List a subscriber's dead letters (parked events).", dlq_list_options,
     run_dlq_list,
     "--json prints one object per line: seq, attempts, error, parked, replaying,\n"
     "event_id, type.\n"},
    {"dlq replay", "Deliver a subscriber's dead letters again, ahead of new events.",
     dlq_replay_options, run_dlq_replay, NULL},
    {"dlq discard", "Remove a subscriber's dead letter for good.", dlq_discard_options,
     run_dlq_discard, NULL},
    {"backup", "Have tallyd write an online, consistent, compacted copy of its store.",
     backup_options, run_backup,
     "DEST is a directory that must not exist yet, on the machine tallyd runs on\n"
     "(below tallyd's --backup-dir when it has one). Restoring: docs/OPERATIONS.md.\n"
     "--json prints one object: code, path, bytes.\n"},
    {NULL}};

static void print_global_help(void)
{
    printf("usage: tally [--url URL] [--publish URL] [--json] [--timeout-ms N]\n"
           "             [--consumer NAME] COMMAND ...\n\n"
           "The command-line client of tallyd: accounts, transfers, holds, entitlements,\n"
           "the event log and its subscribers.\n\n"
           "Commands:\n");
    for (const cli_command *cmd = commands; cmd->name; cmd++)
        print_entry(cmd->name, cmd->summary, NULL);
    printf("\nGlobal options (before or after the command):\n");
    print_option_lines(global_options, false);
    printf("\n%s\n%s\n", help_keys, help_exit);
    printf("Environment:\n"
           "  TALLY_URL       default for --url\n"
           "  TALLY_PUBLISH   default for --publish\n"
           "  TALLY_CONSUMER  default for --consumer\n\n"
           "Run 'tally COMMAND --help' for a command's arguments and options.\n");
}

/* The command named by argv[i] (and argv[i+1] for "group word" names). */
static const cli_command *command_find(int argc, char **argv, int i, int *words)
{
    for (const cli_command *cmd = commands; cmd->name; cmd++) {
        const char *space = strchr(cmd->name, ' ');
        size_t first = space ? (size_t)(space - cmd->name) : strlen(cmd->name);
        if (strlen(argv[i]) != first || strncmp(argv[i], cmd->name, first) != 0)
            continue;
        if (!space) {
            *words = 1;
            return cmd;
        }
        if (i + 1 < argc && strcmp(argv[i + 1], space + 1) == 0) {
            *words = 2;
            return cmd;
        }
    }
    return NULL;
}

/* "account" without a known subcommand: help or a usage error. */
static int group_fallback(cli *c, int argc, char **argv, int i)
{
    size_t len = strlen(argv[i]);
    bool group = false;
    for (const cli_command *cmd = commands; cmd->name; cmd++)
        group |= strncmp(cmd->name, argv[i], len) == 0 && cmd->name[len] == ' ';
    if (!group)
        return usage_error(c, "unknown command '%s'", argv[i]);
    if (i + 1 < argc && strcmp(argv[i + 1], "--help") == 0) {
        for (const cli_command *cmd = commands; cmd->name; cmd++)
            if (strncmp(cmd->name, argv[i], len) == 0 && cmd->name[len] == ' ') {
                print_usage_line(cmd);
                printf("  %s\n", cmd->summary);
            }
        return CLI_EXIT_OK;
    }
    if (i + 1 < argc)
        return usage_error(c, "unknown command '%s %s'", argv[i], argv[i + 1]);
    return usage_error(c, "'%s' needs a subcommand", argv[i]);
}

/* Global options up to the command word; *index gets its position. */
static int parse_global(cli *c, int argc, char **argv, int *index)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-' && argv[i][2]; i++) {
        int rc = parse_option(c, argc, argv, &i);
        if (rc != CLI_EXIT_OK)
            return rc;
    }
    *index = i;
    return CLI_EXIT_OK;
}

/* Resolve --url/--consumer with their environment defaults and open the client. */
static int client_open(cli *c)
{
    const char *env_url = getenv("TALLY_URL"), *env_consumer = getenv("TALLY_CONSUMER");
    c->url = c->v[SLOT_URL].set ? c->v[SLOT_URL].text
             : env_url && *env_url ? env_url
                                   : CLI_URL_DEFAULT;
    c->consumer = c->v[SLOT_CONSUMER].set       ? c->v[SLOT_CONSUMER].text
                  : env_consumer && *env_consumer ? env_consumer
                                                  : CLI_CONSUMER_DEFAULT;
    const char *env_publish = getenv("TALLY_PUBLISH");
    c->publish = c->v[SLOT_PUBLISH].set      ? c->v[SLOT_PUBLISH].text
                 : env_publish && *env_publish ? env_publish
                                               : CLI_PUBLISH_DEFAULT;
    if (strlen(c->consumer) > TALLY_CONSUMER_BYTES_MAX)
        return usage_error(c, "consumer '%s' is longer than %d bytes", c->consumer,
                           TALLY_CONSUMER_BYTES_MAX);
    tally_client_options o = {.url = c->url,
                              .consumer = c->consumer,
                              .timeout_ms = (uint32_t)value_or(c, SLOT_TIMEOUT_MS, 0),
                              .retries = (uint32_t)value_or(c, SLOT_RETRIES, 0),
                              .retries_set = c->v[SLOT_RETRIES].set};
    int rc = tally_client_open(&o, &c->client);
    if (rc == TALLY_invalid_argument)
        return usage_error(c, "bad URL '%s' or consumer '%s'", c->url, c->consumer);
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally: cannot start the client: %s\n", tally_strerror(rc));
        return CLI_EXIT_REJECTED;
    }
    return CLI_EXIT_OK;
}

/* Everything but running: parse, help, checks. Returns -1 to go on. */
static int cli_prepare(cli *c, int argc, char **argv)
{
    int i, words = 0;
    int rc = parse_global(c, argc, argv, &i);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (c->v[SLOT_HELP].set) {
        print_global_help();
        return CLI_EXIT_OK;
    }
    if (c->v[SLOT_VERSION].set) {
        printf("tally %s\n", PACKAGE_VERSION);
        return CLI_EXIT_OK;
    }
    if (i == argc)
        return usage_error(c, "missing COMMAND");
    if (strcmp(argv[i], "--") == 0 || argv[i][0] == '-')
        return usage_error(c, "unknown option '%s'", argv[i]);
    c->command = command_find(argc, argv, i, &words);
    if (!c->command)
        return group_fallback(c, argc, argv, i);
    rc = parse_command_args(c, argc, argv, i + words);
    if (rc != CLI_EXIT_OK)
        return rc;
    if (c->v[SLOT_HELP].set) {
        print_command_help(c->command);
        return CLI_EXIT_OK;
    }
    rc = check_required(c);
    if (rc != CLI_EXIT_OK)
        return rc;
    c->json = c->v[SLOT_JSON].set;
    return -1;
}

int main(int argc, char **argv)
{
    static cli c; /* large (values, key); one per process */
    int rc = cli_prepare(&c, argc, argv);
    if (rc < 0) {
        rc = client_open(&c);
        if (rc == CLI_EXIT_OK)
            rc = c.command->run(&c);
        tally_client_close(c.client);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tally: cannot write the output: %s\n", strerror(errno));
        return rc == CLI_EXIT_OK ? CLI_EXIT_REJECTED : rc;
    }
    return rc;
}

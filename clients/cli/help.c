/*
 * help.c — the help of `tally`, written from the same tables as the parser:
 * `tally --help`, `tally COMMAND --help`, wrapped to 79 columns.
 */
#include "config.h"

#include "clients/cli/tally_cli.h"

#include <stdio.h>
#include <string.h>

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
    "      so repeating the same command is a retry too.\n"
    "  Another key sending a transfer id that exists gets \"exists\" (or\n"
    "  exists_with_different_<field>) and original_seq, the seq that created it;\n"
    "  one sending an id that failed (e.g. exceeds_credits) within the server's\n"
    "  dedupe window gets \"id_already_failed\" and nothing is applied.\n";

static const char help_exit[] =
    "Exit codes:\n"
    "  0  ok (a replayed write is ok)\n"
    "  1  the server answered with a rejection (exceeds_credits, not_found,\n"
    "     idempotency_key_reused, ...): give up or change the request; the code\n"
    "     is printed\n"
    "  2  usage error: bad option or argument\n"
    "  3  server unreachable, timed out, overloaded or shutting down after the\n"
    "     retries; for a write, retry with the printed key to learn its outcome\n"
    "  4  a server fault (storage_full, io_error, internal, ...): nothing was\n"
    "     stored; retry later with the same key\n"
    "  5  tally health: a readiness check fails, tallyd is not ready (GET /readyz\n"
    "     answers 503); its 1 means only alert checks fail (tallyd is ready)\n";

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

void print_usage_line(const cli_command *cmd)
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

void print_command_help(const cli_command *cmd)
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
           "--consumer NAME, --retries N, --token-file FILE,\n"
           "--tls-ca/--tls-cert/--tls-key FILE, --min-seq N (see 'tally --help').\n\n%s", help_exit);
}

void print_global_help(void)
{
    printf("usage: tally [--url URL] [--publish URL] [--json] [--timeout-ms N]\n"
           "             [--consumer NAME] COMMAND ...\n\n"
           "The command-line client of tallyd: accounts, transfers, holds, entitlements,\n"
           "the event log and its subscribers.\n\n"
           "Commands:\n");
    for (const cli_command *cmd = cli_commands; cmd->name; cmd++)
        print_entry(cmd->name, cmd->summary, NULL);
    printf("\nGlobal options (before or after the command):\n");
    print_option_lines(cli_global_options, false);
    printf("\n%s\n%s\n", help_keys, help_exit);
    printf("Environment:\n"
           "  TALLY_URL       default for --url\n"
           "  TALLY_PUBLISH   default for --publish\n"
           "  TALLY_CONSUMER  default for --consumer\n"
           "  TALLY_TOKEN_FILE  default for --token-file\n"
           "  TALLY_TOKEN     the token itself, when no token file is given\n\n"
           "  TALLY_TLS_CA, TALLY_TLS_CERT, TALLY_TLS_KEY  defaults for --tls-ca,\n"
           "                  --tls-cert, --tls-key (docs/SECURITY.md)\n\n"
           "Run 'tally COMMAND --help' for a command's arguments and options.\n");
}

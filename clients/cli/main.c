/*
 * main.c — `tally`, the command-line client of tallyd, built on libtally.
 *
 * `tally` is one table of commands, each with one table of its arguments and
 * options (cli_option; commands.c), a single parser that checks every value
 * against its entry before a command runs (parse.c, values.c), the help
 * generated from the same tables (help.c), and the output of each command as
 * aligned tables (default) or one JSON object per result (--json, written
 * with jansson; output.c). The commands: writes.c, reads.c, tail.c,
 * subscribers.c. This file finds the command, opens the client and runs it.
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
 * shutting down after the retries, 4 a server fault, 5 (tally health) not
 * ready.
 */
#include "config.h"

#include "clients/cli/tally_cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The command named by argv[i] (and argv[i+1] for "group word" names): a
 * "group word" name before a one-word name with the same first word, so
 * that `transfer get ID` is not `transfer` with an argument. */
static const cli_command *command_find(int argc, char **argv, int i, int *words)
{
    const cli_command *one_word = NULL;
    for (const cli_command *cmd = cli_commands; cmd->name; cmd++) {
        const char *space = strchr(cmd->name, ' ');
        size_t first = space ? (size_t)(space - cmd->name) : strlen(cmd->name);
        if (strlen(argv[i]) != first || strncmp(argv[i], cmd->name, first) != 0)
            continue;
        if (!space) {
            one_word = cmd;
            continue;
        }
        if (i + 1 < argc && strcmp(argv[i + 1], space + 1) == 0) {
            *words = 2;
            return cmd;
        }
    }
    if (one_word)
        *words = 1;
    return one_word;
}

/* "account" without a known subcommand: help or a usage error. */
static int group_fallback(cli *c, int argc, char **argv, int i)
{
    size_t len = strlen(argv[i]);
    bool group = false;
    for (const cli_command *cmd = cli_commands; cmd->name; cmd++)
        group |= strncmp(cmd->name, argv[i], len) == 0 && cmd->name[len] == ' ';
    if (!group)
        return usage_error(c, "unknown command '%s'", argv[i]);
    if (i + 1 < argc && strcmp(argv[i + 1], "--help") == 0) {
        for (const cli_command *cmd = cli_commands; cmd->name; cmd++)
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
    const char *env_token = getenv("TALLY_TOKEN");
    if (env_token && strlen(env_token) > TALLY_CLIENT_TOKEN_BYTES_MAX)
        return usage_error(c, "$TALLY_TOKEN: longer than %d bytes", TALLY_CLIENT_TOKEN_BYTES_MAX);
    static char token[TALLY_CLIENT_TOKEN_BYTES_MAX + 1];
    int trc = cli_token_resolve(c, token, sizeof(token));
    if (trc != CLI_EXIT_OK)
        return trc;
    tally_client_options o = {.url = c->url,
                              .consumer = c->consumer,
                              .timeout_ms = (uint32_t)value_or(c, SLOT_TIMEOUT_MS, 0),
                              .retries = (uint32_t)value_or(c, SLOT_RETRIES, 0),
                              .retries_set = c->v[SLOT_RETRIES].set,
                              /* one call at a time: nothing to merge, so
                               * $TALLY_AUTOBATCH is not read (a bad value
                               * would otherwise read as a bad URL below) */
                              .no_autobatch = true,
                              .token = token[0] ? token : NULL,
                              .tls_ca = c->v[SLOT_TLS_CA].set ? c->v[SLOT_TLS_CA].text : NULL,
                              .tls_cert = c->v[SLOT_TLS_CERT].set ? c->v[SLOT_TLS_CERT].text : NULL,
                              .tls_key = c->v[SLOT_TLS_KEY].set ? c->v[SLOT_TLS_KEY].text : NULL};
    char why[TALLY_PATH_BYTES_MAX + 300];
    int rc = tally_tls_check(&o, c->url, why, sizeof(why));
    if (rc == TALLY_ok && c->command && strcmp(c->command->name, "tail") == 0)
        rc = tally_tls_check(&o, c->publish, why, sizeof(why));
    if (rc != TALLY_ok)
        return usage_error(c, "%s", why);
    c->options = o;
    rc = tally_client_open(&o, &c->client);
    if (rc == TALLY_invalid_argument) /* the consumer and token were checked above */
        return usage_error(c, "bad URL '%s' (tcp://HOST:PORT, ipc:///PATH, ws://HOST:PORT/PATH "
                           "or tls+tcp://HOST:PORT, or a comma-separated list of them)", c->url);
    if (rc != TALLY_ok) {
        fprintf(stderr, "tally: cannot start the client: %s\n", tally_strerror(rc));
        return CLI_EXIT_REJECTED;
    }
    if (c->v[SLOT_MIN_SEQ].set)
        tally_client_set_min_seq(c->client, c->v[SLOT_MIN_SEQ].u);
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

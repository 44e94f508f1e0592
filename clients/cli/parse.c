/*
 * parse.c — the parser of `tally`'s command line: each argument and option
 * is looked up in the command's table (commands.c), then the global one,
 * and its value checked against its row before the command runs.
 */
#include "config.h"

#include "clients/cli/tally_cli.h"
#include "common/cli.h"

#include <inttypes.h>
#include <string.h>

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
    case CLI_UINT: ok = cli_parse_u64(text, o->min, o->max, &v->u); break;
    case CLI_AMOUNT: ok = cli_parse_u64(text, 1, INT64_MAX, &v->u);
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
int parse_option(cli *c, int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    const cli_option *o = c->command ? option_find(c->command->options, arg, len) : NULL;
    if (!o)
        o = option_find(cli_global_options, arg, len);
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
const cli_option *positional_nth(const cli_option *table, int n)
{
    for (; table->name; table++)
        if (table->name[0] != '-' && n-- == 0)
            return table;
    return NULL;
}

/* Parse argv[start..] against the command's table (and the global options). */
int parse_command_args(cli *c, int argc, char **argv, int start)
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

int check_required(cli *c)
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

/*
 * tallyd_options.h — tallyd's options: one table (net/server/tallyd_options.c)
 * for the command line, the config file (/etc/tally/tallyd.conf),
 * --help, --print-config, --example-config and the man page
 * (docs/OPERATIONS.md, "The config file"; docs/DESIGN.md, "The option
 * table").
 */
#ifndef TALLY_NET_TALLYD_OPTIONS_H
#define TALLY_NET_TALLYD_OPTIONS_H

#include "common/options.h"
#include "common/tls_config.h"
#include "net/server/server.h"

/* Read when it exists and no --config is given. */
#define TALLYD_CONFIG_DEFAULT "/etc/tally/tallyd.conf"

/* The --tls-* options as given, until tallyd.c's tls_setup reads the
 * files and builds the server's configuration. */
typedef struct tallyd_tls_choice {
    tls_files files;
    int client_auth; /* an nng_tls_auth_mode, or -1: not given */
    tls_pem pem;
} tallyd_tls_choice;

/* The tallyd_tls_choice the --tls-* rows fill (one per process). */
tallyd_tls_choice *tallyd_options_tls(void);

/* Fill opt from the command line, the config file and the defaults, and
 * check them. Returns -1 to go on and serve, else the exit status (0 after
 * --help, --version, --print-config ...; 2 for a usage error or a bad
 * config file, with the message on stderr; 1 when --webhooks' file cannot
 * be used). opt's strings point into argv and into set, which the caller
 * frees with options_free after the server stopped. */
int tallyd_options_load(int argc, char **argv, net_server_options *opt, options_set *set);

#endif

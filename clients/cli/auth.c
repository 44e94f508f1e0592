/*
 * auth.c — the CLI's side of tallyd --auth (docs/SECURITY.md): the token
 * it sends (--token-file, $TALLY_TOKEN_FILE, $TALLY_TOKEN), and `tally auth
 * hash`, which prints the SHA-256 of a token for a principal line.
 */
#include "clients/cli/tally_cli.h"

#include "common/file_mode.h"
#include "common/sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_token_resolve(cli *c, char *out, size_t size)
{
    const char *env_file = getenv("TALLY_TOKEN_FILE");
    const char *path = c->v[SLOT_TOKEN_FILE].set ? c->v[SLOT_TOKEN_FILE].text
                       : env_file && *env_file   ? env_file
                                                 : NULL;
    out[0] = '\0';
    if (path == NULL)
        return CLI_EXIT_OK; /* libtally still reads $TALLY_TOKEN */
    char why[TALLY_PATH_BYTES_MAX + 200];
    if (!file_secret_read(path, "token file", out, size, why, sizeof(why)))
        return usage_error(c, "%s", why);
    return CLI_EXIT_OK;
}

/* A token on stdin (one line, a trailing newline dropped), its SHA-256
 * in hex on stdout: the second column of a principal line. */
int run_auth_hash(cli *c)
{
    char token[TALLY_CLIENT_TOKEN_BYTES_MAX + 2];
    size_t n = fread(token, 1, sizeof(token), stdin);
    if (n > 0 && token[n - 1] == '\n')
        n--;
    if (n > 0 && token[n - 1] == '\r')
        n--;
    if (n == 0 || n > TALLY_CLIENT_TOKEN_BYTES_MAX || memchr(token, '\n', n))
        return usage_error(c, "expected one token of 1-%d bytes on stdin",
                           TALLY_CLIENT_TOKEN_BYTES_MAX);
    uint8_t h[SHA256_BYTES];
    sha256_digest(token, n, h);
    for (int i = 0; i < SHA256_BYTES; i++)
        printf("%02x", h[i]);
    printf("\n");
    return CLI_EXIT_OK;
}

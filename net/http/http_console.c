/*
 * http_console.c — what the web console (docs/CONSOLE.md) needs of the
 * HTTP face beside the JSON API:
 *
 *   GET /v1/figures[?since_ms=T]  the last hour's figures, one sample a
 *                 second (net/metrics/figures_history.h); needs the `read` grant
 *   GET /v1/whoami  the token's principal and whether it holds `read` and
 *                 `admin` (the console hides what it may not do); without a
 *                 token, nobody (no grant); without --auth, anyone, with
 *                 every grant
 *   GET /console/FILE  the console's static files from --console-dir,
 *                 with their content type and a strict
 *                 Content-Security-Policy; /console redirects to /console/
 *
 * Without --auth the console is served only when the HTTP face listens on
 * a loopback address: anyone who reaches it may change the ledger.
 */
#include "net/http/face.h"

#include "common/error.h"
#include "common/limits.h"
#include "net/auth/listen_policy.h"
#include "net/metrics/figures_history.h"
#include "net/metrics/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JSON "application/json"

/* No inline script or style, nothing from elsewhere, no framing. */
#define CONSOLE_CSP                                                                          \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "        \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

/* ---- GET /v1/figures ---- */

typedef struct figures_query {
    int64_t since_ms;
    int code; /* TALLY_ok, or why the query is refused */
    char detail[96];
} figures_query;

static bool figures_arg(void *arg, const char *name, const char *value)
{
    figures_query *q = arg;
    char *end = NULL;
    if (strcmp(name, "since_ms") != 0) {
        q->code = TALLY_unknown_field;
        snprintf(q->detail, sizeof(q->detail), "%.40s (figures take since_ms)", name);
        return false;
    }
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (value[0] == '\0' || *end != '\0' || errno != 0 || v < 0) {
        q->code = TALLY_wrong_type;
        snprintf(q->detail, sizeof(q->detail), "since_ms: a time in ms since the epoch");
        return false;
    }
    q->since_ms = v;
    return true;
}

void http_figures_route(void *ctx, const net_http_request *rq, net_http_reply *out)
{
    server *srv = ctx;
    if (!http_caller_check(srv, rq, "figures", out))
        return;
    figures_query q = {0, TALLY_ok, ""};
    net_http_query_each(rq, figures_arg, &q);
    if (q.code != TALLY_ok)
        return http_json_error(out, q.code, q.detail);
    out->content_type = JSON;
    net_history_json(srv->history, q.since_ms, &out->body);
}

/* ---- GET /v1/whoami ---- */

void http_whoami_route(void *ctx, const net_http_request *rq, net_http_reply *out)
{
    server *srv = ctx;
    char name[AUTH_NAME_BYTES_MAX + 1] = "";
    bool read = true, admin = true;
    tally_str token = http_bearer_token(rq);
    if (srv->auth && token.ptr == NULL) {
        read = admin = false; /* nobody: the console asks for a token */
    } else if (srv->auth) {
        int rc = auth_guard_whoami(srv->auth, token, name, sizeof(name), &read, &admin);
        if (rc != TALLY_ok) {
            net_metrics_auth_refused(rc);
            return http_json_error(out, rc, "unknown token");
        }
    }
    out->content_type = JSON;
    net_text_printf(&out->body, "{\"auth\":%s,\"principal\":", srv->auth ? "true" : "false");
    if (srv->auth && token.ptr != NULL) {
        net_text_printf(&out->body, "\"");
        net_text_escaped(&out->body, name);
        net_text_printf(&out->body, "\"");
    } else {
        net_text_printf(&out->body, "null");
    }
    net_text_printf(&out->body, ",\"read\":%s,\"admin\":%s}\n", read ? "true" : "false",
                    admin ? "true" : "false");
}

/* ---- GET /console/FILE ---- */

static const struct {
    const char *suffix, *type;
} console_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
};

/* The content type of a file name the console may have ([a-z0-9_-] and
 * one dot before a known suffix, so no path leaves the directory), or
 * NULL. */
static const char *console_type(const char *name)
{
    size_t n = strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-");
    if (n == 0 || name[n] != '.' || strchr(name + n + 1, '.') || strchr(name + n + 1, '/'))
        return NULL;
    for (size_t i = 0; i < sizeof(console_types) / sizeof(console_types[0]); i++)
        if (strcmp(name + n, console_types[i].suffix) == 0)
            return console_types[i].type;
    return NULL;
}

/* Read dir/name whole into out (at most TALLY_CONSOLE_FILE_BYTES_MAX):
 * 0, or an errno (EFBIG when larger). */
static int console_read(const char *dir, const char *name, net_text *out)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
        return ENAMETOOLONG;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno;
    struct stat st;
    int err = fstat(fd, &st) != 0 ? errno : !S_ISREG(st.st_mode) ? ENOENT
                                           : st.st_size > TALLY_CONSOLE_FILE_BYTES_MAX ? EFBIG
                                                                                       : 0;
    char *bytes = err ? NULL : malloc((size_t)st.st_size + 1);
    if (err == 0 && bytes == NULL)
        err = ENOMEM;
    size_t got = 0;
    while (err == 0 && got < (size_t)st.st_size) {
        ssize_t r = read(fd, bytes + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            err = r < 0 ? errno : EIO; /* shorter than its size: changed while read */
        else
            got += (size_t)r;
    }
    close(fd);
    if (err) {
        free(bytes);
        return err;
    }
    bytes[got] = '\0';
    *out = (net_text){bytes, got, got + 1, false};
    return 0;
}

static void console_text(net_http_reply *out, unsigned status, const char *text)
{
    out->status = status;
    out->content_type = "text/plain; charset=utf-8";
    net_text_printf(&out->body, "%s\n", text);
}

void http_console_route(void *ctx, const net_http_request *rq, net_http_reply *out)
{
    server *srv = ctx;
    const char *dir = srv->opt->console_dir;
    out->headers[0].name = "Content-Security-Policy";
    out->headers[0].value = CONSOLE_CSP;
    out->headers[1].name = "X-Content-Type-Options";
    out->headers[1].value = "nosniff";
    if (dir == NULL)
        return console_text(out, 404, "no console here (tallyd --console-dir none)");
    if (srv->auth == NULL && !net_url_is_loopback(srv->opt->http_url))
        return console_text(out, 403, "without --auth the console is served on a loopback "
                                      "address only (docs/CONSOLE.md)");
    if (strcmp(rq->path, "/console") == 0) {
        out->status = 308;
        out->headers[2].name = "Location";
        out->headers[2].value = "/console/";
        return console_text(out, 308, "/console/");
    }
    const char *name = rq->path + strlen("/console/");
    if (name[0] == '\0')
        name = "index.html";
    const char *type = console_type(name);
    if (type == NULL)
        return console_text(out, 404, "no such console file");
    int err = console_read(dir, name, &out->body);
    if (err == ENOENT || err == ELOOP)
        return console_text(out, 404, "no such console file");
    if (err) {
        net_log(NET_LOG_WARN, "console: %s/%s not served: %s", dir, name, strerror(err));
        return console_text(out, 500, "console file not readable (see tallyd's log)");
    }
    out->content_type = type;
    out->headers[2].name = "Cache-Control";
    out->headers[2].value = "no-cache";
}

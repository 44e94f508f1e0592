/*
 * relay_receiver.c — the HTTP receiver of tally-relay's tests
 * (relay_receiver.h).
 */
#include "tests/support/relay_receiver.h"

#include "tests/support/test_support.h"
#include "tests/support/wait.h"

#include <arpa/inet.h>
#include <check.h>
#include <jansson.h>
#include <mbedtls/base64.h>
#include <mbedtls/md.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>


/* The Standard Webhooks signature, computed here with mbedTLS. */
static bool signature_verifies(const char *key_b64, const char *id, const char *timestamp,
                               const char *body, size_t body_len, const char *signature)
{
    unsigned char key[64], mac[32], b64[64];
    size_t key_len = 0, b64_len = 0;
    if (mbedtls_base64_decode(key, sizeof(key), &key_len, (const unsigned char *)key_b64,
                              strlen(key_b64)) != 0)
        return false;
    size_t head_len = strlen(id) + 1 + strlen(timestamp) + 1;
    char *text = malloc(head_len + body_len + 1);
    if (text == NULL)
        return false;
    snprintf(text, head_len + 1, "%s.%s.", id, timestamp);
    memcpy(text + head_len, body, body_len);
    int rc = mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key, key_len,
                             (unsigned char *)text, head_len + body_len, mac);
    free(text);
    if (rc != 0 || mbedtls_base64_encode(b64, sizeof(b64), &b64_len, mac, sizeof(mac)) != 0)
        return false;
    char expected[80];
    snprintf(expected, sizeof(expected), "v1,%.*s", (int)b64_len, b64);
    return strcmp(expected, signature) == 0;
}

/* A header's value (case-insensitive name) copied into out, "" if absent. */
static void header_value(const char *head, const char *name, char *out, size_t size)
{
    out[0] = '\0';
    size_t len = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p; p = strstr(p + 2, "\r\n")) {
        if (strncasecmp(p + 2, name, len) == 0 && p[2 + len] == ':') {
            const char *v = p + 3 + len;
            while (*v == ' ')
                v++;
            size_t n = strcspn(v, "\r\n");
            snprintf(out, size, "%.*s", (int)(n < size ? n : size - 1), v);
            return;
        }
    }
}

/* How many deliveries of id to path came before (under r->mu). */
int receiver_attempts_before(const receiver *r, const char *path, const char *id)
{
    int n = 0;
    for (size_t i = 0; i < r->count; i++)
        n += strcmp(r->hooks[i].path, path) == 0 && strcmp(r->hooks[i].id, id) == 0;
    return n;
}

/* /ok answers 204; /dead 500; /toggle 500 while toggle_fails, else 200;
 * /flaky 503 to the first 2 attempts of every
 * 3rd event (seq % 3 == 0), else 200; /slow 200 after RECEIVER_SLOW_POST_MS. */
static int decide(const receiver *r, const char *path, const hook *h)
{
    if (strcmp(path, "/dead") == 0 ||
        (strcmp(path, "/toggle") == 0 && atomic_load(&r->toggle_fails)))
        return 500;
    if (strcmp(path, "/flaky") == 0 && h->seq % 3 == 0 && receiver_attempts_before(r, path, h->id) < 2)
        return 503;
    return strcmp(path, "/ok") == 0 ? 204 : 200;
}

static bool read_request(int fd, char *buf, size_t size, size_t *head_len, size_t *total)
{
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 10000) <= 0 || have + 1 >= size)
            return false;
        ssize_t n = read(fd, buf + have, size - 1 - have);
        if (n <= 0)
            return false;
        have += (size_t)n;
        buf[have] = '\0';
        end = strstr(buf, "\r\n\r\n");
    }
    *head_len = (size_t)(end - buf) + 4;
    char length[24];
    header_value(buf, "content-length", length, sizeof(length));
    *total = *head_len + strtoull(length, NULL, 10);
    while (have < *total) {
        struct pollfd p = {fd, POLLIN, 0};
        if (*total >= size || poll(&p, 1, 10000) <= 0)
            return false;
        ssize_t n = read(fd, buf + have, *total - have);
        if (n <= 0)
            return false;
        have += (size_t)n;
    }
    buf[*total] = '\0';
    return true;
}

static void serve_one(receiver *r, int fd, char *buf)
{
    size_t head_len, total;
    if (!read_request(fd, buf, RECEIVER_REQUEST_BYTES_MAX, &head_len, &total))
        return;
    hook h = {0};
    char timestamp[32], signature[128];
    sscanf(buf, "POST %15s ", h.path);
    header_value(buf, "webhook-id", h.id, sizeof(h.id));
    header_value(buf, "webhook-timestamp", timestamp, sizeof(timestamp));
    header_value(buf, "webhook-signature", signature, sizeof(signature));
    const char *body = buf + head_len;
    static const char *const keys[] = {RECEIVER_SECRET_B64, RECEIVER_SECRET2_B64, RECEIVER_SECRET3_B64};
    char *save = NULL;
    for (char *one = strtok_r(signature, " ", &save); one; one = strtok_r(NULL, " ", &save)) {
        h.signatures++;
        for (unsigned k = 0; k < 3; k++)
            if (signature_verifies(keys[k], h.id, timestamp, body, total - head_len, one))
                h.keys_ok |= 1u << k;
    }
    h.signature_ok = h.keys_ok != 0;
    json_t *doc = json_loadb(body, total - head_len, 0, NULL);
    h.seq = (uint64_t)json_integer_value(json_object_get(doc, "seq"));
    snprintf(h.type, sizeof(h.type), "%s", json_string_value(json_object_get(doc, "type")));
    const char *body_id = json_string_value(json_object_get(doc, "event_id"));
    h.signature_ok = h.signature_ok && body_id && strcmp(body_id, h.id) == 0;
    json_decref(doc);
    pthread_mutex_lock(&r->mu);
    h.status = decide(r, h.path, &h);
    if (r->count < RECEIVER_HOOKS_MAX)
        r->hooks[r->count++] = h;
    pthread_mutex_unlock(&r->mu);
    if (strcmp(h.path, "/slow") == 0)
        test_pause_ms(RECEIVER_SLOW_POST_MS); /* the endpoint's latency, not a wait for something */
    char reply[160], text[48];
    int len = snprintf(text, sizeof(text), "status %d from %s\n", h.status, h.path);
    int n = snprintf(reply, sizeof(reply),
                     "HTTP/1.1 %d X\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
                     h.status, len, text);
    ck_assert_int_eq(write(fd, reply, (size_t)n), n);
}

static void *receiver_main(void *arg)
{
    receiver *r = arg;
    char *buf = malloc(RECEIVER_REQUEST_BYTES_MAX);
    while (buf && !atomic_load(&r->stop)) {
        struct pollfd p = {r->fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int c = accept(r->fd, NULL, NULL);
        if (c < 0)
            continue;
        serve_one(r, c, buf);
        close(c);
    }
    free(buf);
    return NULL;
}

receiver *receiver_start(void)
{
    receiver *r = calloc(1, sizeof(*r));
    ck_assert_ptr_nonnull(r);
    r->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    ck_assert(r->fd >= 0 && bind(r->fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
              listen(r->fd, 64) == 0 && getsockname(r->fd, (struct sockaddr *)&a, &len) == 0);
    r->port = ntohs(a.sin_port);
    pthread_mutex_init(&r->mu, NULL);
    ck_assert_int_eq(pthread_create(&r->thread, NULL, receiver_main, r), 0);
    return r;
}

void receiver_stop(receiver *r)
{
    atomic_store(&r->stop, true);
    pthread_join(r->thread, NULL);
    close(r->fd);
    free(r);
}

/* Distinct ids answered 2xx at path, and all deliveries to path. */
size_t receiver_delivered(receiver *r, const char *path, size_t *all)
{
    pthread_mutex_lock(&r->mu);
    size_t ok = 0, n = 0;
    for (size_t i = 0; i < r->count; i++) {
        if (strcmp(r->hooks[i].path, path) != 0)
            continue;
        n++;
        if (r->hooks[i].status / 100 != 2)
            continue;
        bool first = true;
        for (size_t j = 0; j < i && first; j++)
            first = !(strcmp(r->hooks[j].path, path) == 0 && r->hooks[j].status / 100 == 2 &&
                      strcmp(r->hooks[j].id, r->hooks[i].id) == 0);
        ok += first;
    }
    pthread_mutex_unlock(&r->mu);
    if (all)
        *all = n;
    return ok;
}


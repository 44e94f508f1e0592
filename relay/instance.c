/*
 * instance.c — which relay is which (docs/RELAY.md, "Several relays").
 * Each relay fetches every sink's events as one consumer instance, and
 * tallyd leases what it hands out to that instance. Two live relays with
 * one instance on one subscriber would be one consumer: each one's
 * restart would hand it the other's unacknowledged events, delivered
 * twice. So the default instance names the host (distinct across hosts,
 * stable across restarts), and a relay claims each (tallyd, subscriber,
 * instance) it runs with a lock file: a second relay of the same host
 * that would share one is refused at start.
 */
#include "config.h"

#include "relay/relay.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

uint64_t relay_text_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void relay_instance_default(char out[TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX + 1])
{
    char host[256] = "";
    size_t size = TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX + 1;
    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
        snprintf(out, size, "%s", RELAY_INSTANCE_PREFIX);
        return;
    }
    snprintf(out, size, "%s.%s", RELAY_INSTANCE_PREFIX, host);
    for (char *p = out + sizeof(RELAY_INSTANCE_PREFIX); *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            *p = '-';
}

/* Lock the claim of one subscriber; the descriptor stays open (and the
 * lock held) until the process exits, however it exits. */
static bool claim_one(const char *lock_dir, const char *url, const char *subscriber,
                      const char *instance, char *error, size_t error_size)
{
    char key[RELAY_URL_BYTES_MAX + 2 * TALLY_CLIENT_SUB_INSTANCE_BYTES_MAX + 8];
    char path[RELAY_URL_BYTES_MAX + 64];
    snprintf(key, sizeof(key), "%s\n%s\n%s", url, subscriber, instance);
    snprintf(path, sizeof(path), "%s/tally-relay.%016" PRIx64 ".lock", lock_dir,
             relay_text_hash(key));
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        fprintf(stderr, "tally-relay: %s: %s; instance %s on subscriber %s is not checked "
                        "against the other relays of this host\n",
                path, strerror(errno), instance, subscriber);
        return true;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        char pid[24];
        int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
            fprintf(stderr, "tally-relay: %s: %s\n", path, strerror(errno));
        return true;
    }
    char holder[24] = "";
    ssize_t got = pread(fd, holder, sizeof(holder) - 1, 0);
    holder[got > 0 ? got : 0] = '\0';
    holder[strcspn(holder, "\n")] = '\0';
    close(fd);
    snprintf(error, error_size,
             "instance %s already runs subscriber %s of %s in another tally-relay of this host "
             "(pid %s, %s): give each relay its own --instance (docs/RELAY.md, \"Several relays\")",
             instance, subscriber, url, holder[0] ? holder : "?", path);
    return false;
}

bool relay_instance_claim_one(const relay_config *c, const char *subscriber, char *error,
                              size_t error_size)
{
    return claim_one(c->lock_dir, c->url, subscriber, c->instance, error, error_size);
}

bool relay_instance_claim(const relay_config *c, char *error, size_t error_size)
{
    if (c->nats.enabled &&
        !claim_one(c->lock_dir, c->url, c->nats.sub.name, c->instance, error, error_size))
        return false;
    for (size_t i = 0; i < c->endpoint_count; i++)
        if (!claim_one(c->lock_dir, c->url, c->endpoints[i].sub.name, c->instance, error,
                       error_size))
            return false;
    return true;
}

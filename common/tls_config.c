/*
 * tls_config.c — see tls_config.h.
 */
#include "common/tls_config.h"

#include "common/error.h"
#include "common/file_mode.h"
#include "common/limits.h"

#include <errno.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole file as a NUL-terminated string: 1 byte .. 1 MiB. */
static int read_text(const char *path, char **out, char *why, size_t why_len)
{
    size_t n = 0;
    char *text = file_read_bounded(path, NULL, TALLY_TLS_FILE_BYTES_MAX, &n, why, why_len);
    if (text != NULL && n == 0) {
        snprintf(why, why_len, "%s: empty", path);
        free(text);
        text = NULL;
    }
    if (text == NULL)
        return TALLY_invalid_argument;
    *out = text;
    return TALLY_ok;
}

static int mbed_refused(const char *path, const char *what, int err, char *why, size_t why_len)
{
    char reason[200];
    mbedtls_strerror(err, reason, sizeof(reason));
    snprintf(why, why_len, "%s: not a PEM %s (mbedTLS: %s)", path, what, reason);
    return TALLY_invalid_argument;
}

/* Parse pem as certificates; with key, also check that key is the
 * private half of the first certificate's public key. */
static int check_pem(const tls_files *f, const tls_pem *p, char *why, size_t why_len)
{
    mbedtls_x509_crt crt;
    mbedtls_pk_context pk;
    int rc = TALLY_ok, err;
    mbedtls_x509_crt_init(&crt);
    mbedtls_pk_init(&pk);
    if (p->ca && (err = mbedtls_x509_crt_parse(&crt, (const unsigned char *)p->ca,
                                               strlen(p->ca) + 1)) != 0)
        rc = mbed_refused(f->ca, "CA certificate", err, why, why_len);
    mbedtls_x509_crt_free(&crt);
    mbedtls_x509_crt_init(&crt);
    if (rc == TALLY_ok && p->cert &&
        (err = mbedtls_x509_crt_parse(&crt, (const unsigned char *)p->cert,
                                      strlen(p->cert) + 1)) != 0)
        rc = mbed_refused(f->cert, "certificate", err, why, why_len);
    if (rc == TALLY_ok && p->key &&
        (err = mbedtls_pk_parse_key(&pk, (const unsigned char *)p->key, strlen(p->key) + 1,
                                    NULL, 0)) != 0)
        rc = mbed_refused(f->key, "private key (unencrypted)", err, why, why_len);
    if (rc == TALLY_ok && p->key && (err = mbedtls_pk_check_pair(&crt.pk, &pk)) != 0) {
        char reason[200];
        mbedtls_strerror(err, reason, sizeof(reason));
        snprintf(why, why_len, "%s: not the key of the certificate in %s (mbedTLS: %s)", f->key,
                 f->cert, reason);
        rc = TALLY_invalid_argument;
    }
    mbedtls_pk_free(&pk);
    mbedtls_x509_crt_free(&crt);
    return rc;
}

int tls_pem_load(const tls_files *f, tls_pem *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof(*out));
    if ((f->cert == NULL) != (f->key == NULL)) {
        snprintf(why, why_len, "a TLS certificate needs its key and a key its certificate "
                 "(%s given alone)", f->cert ? f->cert : f->key);
        return TALLY_invalid_argument;
    }
    if (f->key && !file_private_check(f->key, "TLS key", why, why_len))
        return TALLY_invalid_argument;
    int rc = TALLY_ok;
    if (f->ca)
        rc = read_text(f->ca, &out->ca, why, why_len);
    if (rc == TALLY_ok && f->cert)
        rc = read_text(f->cert, &out->cert, why, why_len);
    if (rc == TALLY_ok && f->key)
        rc = read_text(f->key, &out->key, why, why_len);
    if (rc == TALLY_ok)
        rc = check_pem(f, out, why, why_len);
    if (rc != TALLY_ok)
        tls_pem_free(out);
    return rc;
}

void tls_pem_free(tls_pem *p)
{
    if (p->key) /* the private key does not linger in freed memory */
        memset(p->key, 0, strlen(p->key));
    free(p->ca);
    free(p->cert);
    free(p->key);
    memset(p, 0, sizeof(*p));
}

bool tls_url_is_tls(const char *url)
{
    return url != NULL && strncmp(url, "tls+tcp", 7) == 0;
}

/* The common part: own certificate, CA, auth mode, server name. */
static int config_new(const tls_pem *pem, nng_tls_mode mode, nng_tls_auth_mode auth,
                      const char *server_name, nng_tls_config **out, char *why, size_t why_len)
{
    nng_tls_config *cfg;
    int rv = nng_tls_config_alloc(&cfg, mode);
    if (rv != 0) {
        snprintf(why, why_len, "TLS unavailable: %s (NNG built without TLS?)", nng_strerror(rv));
        return TALLY_internal;
    }
    const char *step = "the CA";
    if (pem->ca)
        rv = nng_tls_config_ca_chain(cfg, pem->ca, NULL);
    if (rv == 0 && pem->cert) {
        step = "the certificate and key";
        rv = nng_tls_config_own_cert(cfg, pem->cert, pem->key, NULL);
    }
    if (rv == 0 && server_name) {
        step = "the server name";
        rv = nng_tls_config_server_name(cfg, server_name);
    }
    if (rv == 0) {
        step = "the authentication mode";
        rv = nng_tls_config_auth_mode(cfg, auth);
    }
    if (rv != 0) {
        snprintf(why, why_len, "TLS configuration refused %s: %s", step, nng_strerror(rv));
        nng_tls_config_free(cfg);
        return rv == NNG_ENOMEM ? TALLY_out_of_memory : TALLY_invalid_argument;
    }
    *out = cfg;
    return TALLY_ok;
}

int tls_config_server(const tls_pem *pem, nng_tls_auth_mode auth, nng_tls_config **out,
                      char *why, size_t why_len)
{
    if (pem->cert == NULL) {
        snprintf(why, why_len, "a TLS listener needs --tls-cert and --tls-key");
        return TALLY_invalid_argument;
    }
    if (auth != NNG_TLS_AUTH_MODE_NONE && pem->ca == NULL) {
        snprintf(why, why_len, "checking client certificates needs --tls-ca");
        return TALLY_invalid_argument;
    }
    return config_new(pem, NNG_TLS_MODE_SERVER, auth, NULL, out, why, why_len);
}

int tls_config_client(const tls_pem *pem, const char *url, nng_tls_config **out, char *why,
                      size_t why_len)
{
    if (pem->ca == NULL) {
        snprintf(why, why_len, "%s: a tls+tcp:// URL needs the CA that signed the server's "
                 "certificate (--tls-ca FILE or TALLY_TLS_CA)", url);
        return TALLY_invalid_argument;
    }
    nng_url *u;
    if (nng_url_parse(&u, url) != 0) {
        snprintf(why, why_len, "%s: not a URL", url);
        return TALLY_invalid_argument;
    }
    int rc = config_new(pem, NNG_TLS_MODE_CLIENT, NNG_TLS_AUTH_MODE_REQUIRED, u->u_hostname, out,
                        why, why_len);
    nng_url_free(u);
    return rc;
}

int tls_listen(nng_socket s, const char *url, nng_tls_config *cfg, nng_listener *out)
{
    if (cfg == NULL)
        return nng_listen(s, url, out, 0);
    nng_listener l;
    int rv = nng_listener_create(&l, s, url);
    if (rv != 0)
        return rv;
    rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, cfg);
    if (rv == 0)
        rv = nng_listener_start(l, 0);
    if (rv != 0)
        nng_listener_close(l);
    else if (out)
        *out = l;
    return rv;
}

int tls_dial(nng_socket s, const char *url, nng_tls_config *cfg, nng_dialer *out, int flags)
{
    if (cfg == NULL)
        return nng_dial(s, url, out, flags);
    nng_dialer d;
    int rv = nng_dialer_create(&d, s, url);
    if (rv != 0)
        return rv;
    rv = nng_dialer_set_ptr(d, NNG_OPT_TLS_CONFIG, cfg);
    if (rv == 0)
        rv = nng_dialer_start(d, flags);
    if (rv != 0)
        nng_dialer_close(d);
    else if (out)
        *out = d;
    return rv;
}

/*
 * tls_config.h — TLS for tally's NNG endpoints (tls+tcp://) and its HTTPS
 * face: certificate, key and CA files read and checked once, with reasons
 * that name the file, and the NNG TLS configurations built from them.
 * Shared by tallyd and every client (libtally, the CLI, tally-bench,
 * tally-relay), so both ends check a file the same way. NNG 1.5.2's TLS
 * engine is mbedTLS; the files are parsed here with mbedTLS too, so a file
 * this accepts is one NNG accepts, and its refusal carries mbedTLS's own
 * words (NNG would only say "Cryptographic error"). docs/SECURITY.md.
 */
#ifndef TALLY_COMMON_TLS_CONFIG_H
#define TALLY_COMMON_TLS_CONFIG_H

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <stdbool.h>
#include <stddef.h>

/* The files, as paths; NULL: not given. */
typedef struct tls_files {
    const char *ca;   /* PEM CA certificate(s) that peers' certificates must chain to */
    const char *cert; /* PEM certificate (and chain) presented to peers */
    const char *key;  /* PEM private key of cert: mode 0600 or stricter */
} tls_files;

/* The files' text, NUL-terminated; NULL where the file was not given. */
typedef struct tls_pem {
    char *ca, *cert, *key;
} tls_pem;

/* Read each given file (at most TALLY_TLS_FILE_BYTES_MAX) and parse it
 * with mbedTLS: the CA and the certificate as X.509, the key as a private
 * key that is not group- or world-readable (file_private_check) and matches
 * the certificate. A cert needs its key and a key its cert. Returns
 * TALLY_ok with out filled (free with tls_pem_free), or
 * TALLY_invalid_argument with why naming the file and the reason. */
int tls_pem_load(const tls_files *f, tls_pem *out, char *why, size_t why_len);
void tls_pem_free(tls_pem *p);

/* true for NNG's TLS URLs: tls+tcp://, tls+tcp4://, tls+tcp6://. */
bool tls_url_is_tls(const char *url);

/* A server configuration: cert and key required; auth says whether a
 * client certificate is not asked for, checked when given, or required
 * (both need the CA). TALLY_ok with *out (nng_tls_config_free), or
 * TALLY_invalid_argument with why. */
int tls_config_server(const tls_pem *pem, nng_tls_auth_mode auth, nng_tls_config **out,
                      char *why, size_t why_len);
/* A client configuration for url: the server's certificate must chain to
 * the CA (required: without one a tls URL is refused, never unverified)
 * and name the URL's host (a DNS name or IP address in its subject
 * alternative names, or its common name); cert and key, when given, are
 * presented as the client certificate. */
int tls_config_client(const tls_pem *pem, const char *url, nng_tls_config **out, char *why,
                      size_t why_len);

/* nng_listen / nng_dial with cfg set on the endpoint before it starts
 * (cfg NULL: as nng_listen / nng_dial). NNG error codes. */
int tls_listen(nng_socket s, const char *url, nng_tls_config *cfg, nng_listener *out);
int tls_dial(nng_socket s, const char *url, nng_tls_config *cfg, nng_dialer *out, int flags);

#endif

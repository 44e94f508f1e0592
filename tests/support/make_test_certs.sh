#!/bin/sh
# tests/support/make_test_certs.sh DIR — the certificates of tally's TLS
# tests, made with the openssl CLI (docs/SECURITY.md shows the same steps):
#   ca.pem ca.key                    the test CA
#   server.pem server.key            signed by it, for 127.0.0.1 and localhost
#   client.pem client.key            a client certificate signed by it
#   other-ca.pem, other-client.pem other-client.key   a second CA and its client
#   expired-client.pem expired-client.key  signed by the test CA, expired in 2020
# Keys are EC P-256, mode 0600. The server certificate names 127.0.0.1 as
# an IP address and as a DNS name: mbedTLS 2.28 (NNG's TLS) matches a host
# only against DNS names and the common name, GnuTLS (curl) against IP ones.
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
umask 077

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

ca() { # NAME CN
    key "$1.key"
    openssl req -x509 -new -key "$1.key" -sha256 -days 3650 -subj "/CN=$2" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
        -out "$1.pem" 2>/dev/null
}

leaf() { # NAME CN CA EXT
    key "$1.key"
    openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
    printf '%s\n' "$4" > "$1.ext"
    openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 365 \
        -sha256 -extfile "$1.ext" -out "$1.pem" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}

ca ca "tally test CA"
ca other-ca "another CA"
leaf server 127.0.0.1 ca "subjectAltName=IP:127.0.0.1,DNS:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
leaf client test-client ca "extendedKeyUsage=clientAuth"
leaf other-client other-client other-ca "extendedKeyUsage=clientAuth"

# An expired client certificate: openssl x509 takes no start date, openssl ca does.
key expired-client.key
openssl req -new -key expired-client.key -subj "/CN=expired-client" -out expired.csr 2>/dev/null
mkdir -p ca-db
: > ca-db/index.txt
cat > ca-db/ca.cnf <<CNF
[ ca ]
default_ca = test
[ test ]
database = ca-db/index.txt
new_certs_dir = ca-db
serial = ca-db/serial
default_md = sha256
policy = any
copy_extensions = none
x509_extensions = client
[ any ]
commonName = supplied
[ client ]
extendedKeyUsage = clientAuth
CNF
echo 1000 > ca-db/serial
openssl ca -batch -config ca-db/ca.cnf -cert ca.pem -keyfile ca.key -in expired.csr \
    -notext -startdate 20200101000000Z -enddate 20200201000000Z -out expired-client.pem 2>/dev/null
rm -rf ca-db expired.csr
chmod 644 ./*.pem

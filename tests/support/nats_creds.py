#!/usr/bin/python3
"""tests/support/nats_creds.py DIR — a NATS operator, its accounts and users
for the cluster's credentials test (tests/cluster/check_cluster_auth.c),
made without nsc: nkeys (ed25519 keys in NATS's base32 form with a CRC-16)
and JWTs signed with them (header {"typ":"JWT","alg":"ed25519-nkey"}),
following the formats of github.com/nats-io/nkeys and nats-io/jwt v2.

Writes into DIR:
  operator.conf  for nats-server -c: the operator's JWT, the system account,
                 `resolver: MEMORY` and `resolver_preload` with the accounts
  user.creds     a user of account TALLY (JetStream enabled): JWT and seed
  stranger.creds a user of an account the operator never signed (refused)
Needs python3-cryptography (Debian's /usr/bin/python3 has it).
"""
import base64
import hashlib
import json
import os
import sys
import time

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives import serialization

PREFIX_SEED = 18 << 3
PREFIX_OPERATOR = 14 << 3
PREFIX_ACCOUNT = 0
PREFIX_USER = 20 << 3


def crc16(data):
    """CRC-16/XMODEM, as nkeys computes it."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def b32(raw):
    return base64.b32encode(raw).decode().rstrip("=")


def encode(prefix_bytes, payload):
    raw = bytes(prefix_bytes) + payload
    return b32(raw + crc16(raw).to_bytes(2, "little"))


class NKey:
    def __init__(self, prefix):
        self.prefix = prefix
        self.key = Ed25519PrivateKey.generate()
        raw = self.key.private_bytes(serialization.Encoding.Raw,
                                     serialization.PrivateFormat.Raw,
                                     serialization.NoEncryption())
        pub = self.key.public_key().public_bytes(serialization.Encoding.Raw,
                                                 serialization.PublicFormat.Raw)
        self.public = encode([prefix], pub)
        self.seed = encode([PREFIX_SEED | (prefix >> 5), (prefix & 31) << 3], raw)

    def sign(self, data):
        return self.key.sign(data)


def b64url(raw):
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def jwt(issuer, subject, name, nats):
    claims = {"iat": int(time.time()), "iss": issuer.public, "name": name,
              "sub": subject.public, "nats": dict(nats, version=2)}
    claims["jti"] = b32(hashlib.sha256(json.dumps(claims, sort_keys=True).encode()).digest())
    header = b64url(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = b64url(json.dumps(claims).encode())
    signature = issuer.sign(f"{header}.{body}".encode())
    return f"{header}.{body}.{b64url(signature)}"


UNLIMITED = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
             "wildcards": True, "conn": -1, "leaf": -1}
JETSTREAM = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}


def account(operator, name, jetstream):
    key = NKey(PREFIX_ACCOUNT)
    limits = dict(UNLIMITED, **(JETSTREAM if jetstream else {}))
    return key, jwt(operator, key, name, {"type": "account", "limits": limits})


def creds(path, account_key, name):
    user = NKey(PREFIX_USER)
    token = jwt(account_key, user, name,
                {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1})
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write("-----BEGIN NATS USER JWT-----\n%s\n------END NATS USER JWT------\n\n"
                "-----BEGIN USER NKEY SEED-----\n%s\n------END USER NKEY SEED------\n"
                % (token, user.seed))


def main(out):
    operator = NKey(PREFIX_OPERATOR)
    operator_jwt = jwt(operator, operator, "tally-test-operator", {"type": "operator"})
    system, system_jwt = account(operator, "SYS", False)
    tally, tally_jwt = account(operator, "TALLY", True)
    stranger_operator = NKey(PREFIX_OPERATOR)
    stranger, _ = account(stranger_operator, "STRANGER", True)
    with open(os.path.join(out, "operator.conf"), "w") as f:
        f.write('operator: "%s"\nsystem_account: %s\nresolver: MEMORY\n'
                'resolver_preload: {\n  %s: "%s"\n  %s: "%s"\n}\n'
                % (operator_jwt, system.public, system.public, system_jwt, tally.public,
                   tally_jwt))
    creds(os.path.join(out, "user.creds"), tally, "tally")
    creds(os.path.join(out, "stranger.creds"), stranger, "stranger")


if __name__ == "__main__":
    main(sys.argv[1])

/*
 * message.c — the command stream's message formats (message.h): packing
 * and checked unpacking of the genesis and of a group of commands.
 */
#include "net/cluster/message.h"

#include "common/error.h"
#include "common/limits.h"
#include "common/msgpack_safe.h"

#include <string.h>

#define MESSAGE_DEPTH_MAX 4

int cluster_genesis_pack(msgpack_sbuffer *sb, const cluster_genesis *g)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 5);
    rc |= msgpack_safe_pack_cstr(&pk, "v") | msgpack_pack_uint32(&pk, CLUSTER_MESSAGE_VERSION);
    rc |= msgpack_safe_pack_cstr(&pk, "cluster") | msgpack_safe_pack_bin(&pk, g->cluster.bytes, 16);
    rc |= msgpack_safe_pack_cstr(&pk, "instance") |
          msgpack_safe_pack_bin(&pk, g->instance.bytes, 16);
    rc |= msgpack_safe_pack_cstr(&pk, "base_seq") | msgpack_pack_uint64(&pk, g->base_seq);
    rc |= msgpack_safe_pack_cstr(&pk, "base_hash") |
          msgpack_safe_pack_bin(&pk, g->base_hash, CLUSTER_HASH_BYTES);
    return rc == 0 ? 0 : -1;
}

/* The map's version: TALLY_ok for this one, else why it is refused. */
static int check_version(const msgpack_object *m)
{
    uint64_t v;
    if (m->type != MSGPACK_OBJECT_MAP || !msgpack_safe_get_u64(msgpack_safe_map_get(m, "v"), &v))
        return TALLY_malformed_request;
    return v == CLUSTER_MESSAGE_VERSION ? TALLY_ok : TALLY_unsupported_version;
}

/* One message map into u (initialised here; the caller destroys it):
 * TALLY_ok for this version, else why it is refused. */
static int unpack_versioned(const void *data, size_t len, msgpack_unpacked *u)
{
    msgpack_unpacked_init(u);
    return msgpack_safe_unpack(data, len, MESSAGE_DEPTH_MAX, u) == TALLY_ok
               ? check_version(&u->data)
               : TALLY_malformed_request;
}

int cluster_genesis_unpack(const void *data, size_t len, cluster_genesis *g)
{
    msgpack_unpacked u;
    int rc = unpack_versioned(data, len, &u);
    const void *hash;
    size_t hash_len;
    if (rc == TALLY_ok &&
        !(msgpack_safe_get_id128(msgpack_safe_map_get(&u.data, "cluster"), &g->cluster) &&
          msgpack_safe_get_id128(msgpack_safe_map_get(&u.data, "instance"), &g->instance) &&
          msgpack_safe_get_u64(msgpack_safe_map_get(&u.data, "base_seq"), &g->base_seq) &&
          msgpack_safe_get_bin(msgpack_safe_map_get(&u.data, "base_hash"), &hash, &hash_len) &&
          hash_len == CLUSTER_HASH_BYTES))
        rc = TALLY_malformed_request;
    if (rc == TALLY_ok)
        memcpy(g->base_hash, hash, CLUSTER_HASH_BYTES);
    msgpack_unpacked_destroy(&u);
    return rc;
}

int cluster_tick_pack(msgpack_sbuffer *sb, int64_t time_ms)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 2);
    rc |= msgpack_safe_pack_cstr(&pk, "v") | msgpack_pack_uint32(&pk, CLUSTER_MESSAGE_VERSION);
    rc |= msgpack_safe_pack_cstr(&pk, "t") | msgpack_pack_int64(&pk, time_ms);
    return rc == 0 ? 0 : -1;
}

int cluster_tick_unpack(const void *data, size_t len, int64_t *time_ms)
{
    msgpack_unpacked u;
    int rc = unpack_versioned(data, len, &u);
    if (rc == TALLY_ok && !msgpack_safe_get_i64(msgpack_safe_map_get(&u.data, "t"), time_ms))
        rc = TALLY_malformed_request;
    msgpack_unpacked_destroy(&u);
    return rc;
}

int cluster_checkpoint_pack(msgpack_sbuffer *sb, const char *node, uint64_t seq,
                            const uint8_t digest[CLUSTER_HASH_BYTES])
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&pk, 4);
    rc |= msgpack_safe_pack_cstr(&pk, "v") | msgpack_pack_uint32(&pk, CLUSTER_MESSAGE_VERSION);
    rc |= msgpack_safe_pack_cstr(&pk, "node") | msgpack_safe_pack_cstr(&pk, node);
    rc |= msgpack_safe_pack_cstr(&pk, "seq") | msgpack_pack_uint64(&pk, seq);
    rc |= msgpack_safe_pack_cstr(&pk, "digest") |
          msgpack_safe_pack_bin(&pk, digest, CLUSTER_HASH_BYTES);
    return rc == 0 ? 0 : -1;
}

/* The node's name (borrowed from data: msgpack_safe's strings point into
 * the bytes) is 1..TALLY_CLUSTER_NODE_BYTES_MAX bytes, the digest 32. */
int cluster_checkpoint_unpack(const void *data, size_t len, cluster_checkpoint *c)
{
    msgpack_unpacked u;
    int rc = unpack_versioned(data, len, &u);
    const void *digest;
    size_t digest_len;
    if (rc == TALLY_ok &&
        !(msgpack_safe_get_str(msgpack_safe_map_get(&u.data, "node"), &c->node) &&
          c->node.len >= 1 && c->node.len <= TALLY_CLUSTER_NODE_BYTES_MAX &&
          msgpack_safe_get_u64(msgpack_safe_map_get(&u.data, "seq"), &c->seq) &&
          msgpack_safe_get_bin(msgpack_safe_map_get(&u.data, "digest"), &digest, &digest_len) &&
          digest_len == CLUSTER_HASH_BYTES))
        rc = TALLY_malformed_request;
    if (rc == TALLY_ok)
        memcpy(c->digest, digest, CLUSTER_HASH_BYTES);
    msgpack_unpacked_destroy(&u);
    return rc;
}

void cluster_cmd_begin(cluster_cmd_builder *b, const char *node, int64_t time_ms, uint32_t count)
{
    msgpack_sbuffer_init(&b->sb);
    msgpack_packer_init(&b->pk, &b->sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_map(&b->pk, 4);
    rc |= msgpack_safe_pack_cstr(&b->pk, "v") | msgpack_pack_uint32(&b->pk, CLUSTER_MESSAGE_VERSION);
    rc |= msgpack_safe_pack_cstr(&b->pk, "node") | msgpack_safe_pack_cstr(&b->pk, node);
    rc |= msgpack_safe_pack_cstr(&b->pk, "t") | msgpack_pack_int64(&b->pk, time_ms);
    rc |= msgpack_safe_pack_cstr(&b->pk, "cmds") | msgpack_pack_array(&b->pk, count);
    b->bad = rc != 0;
}

static bool is_auth_key(const msgpack_object *k)
{
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == 4 &&
           memcmp(k->via.str.ptr, "auth", 4) == 0;
}

void cluster_cmd_add(cluster_cmd_builder *b, const msgpack_object *request)
{
    if (b->bad || request->type != MSGPACK_OBJECT_MAP) {
        b->bad = true;
        return;
    }
    msgpack_sbuffer one;
    msgpack_packer pk;
    msgpack_sbuffer_init(&one);
    msgpack_packer_init(&pk, &one, msgpack_sbuffer_write);
    const msgpack_object_map *m = &request->via.map;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < m->size; i++)
        kept += !is_auth_key(&m->ptr[i].key);
    int rc = msgpack_pack_map(&pk, kept);
    for (uint32_t i = 0; i < m->size; i++)
        if (!is_auth_key(&m->ptr[i].key))
            rc |= msgpack_pack_object(&pk, m->ptr[i].key) | msgpack_pack_object(&pk, m->ptr[i].val);
    if (rc == 0)
        rc = msgpack_safe_pack_bin(&b->pk, one.data, one.size);
    msgpack_sbuffer_destroy(&one);
    b->bad = rc != 0;
}

int cluster_cmd_end(cluster_cmd_builder *b, const void **data, size_t *len)
{
    *data = b->sb.data;
    *len = b->sb.size;
    return b->bad ? -1 : 0;
}

void cluster_cmd_free(cluster_cmd_builder *b)
{
    msgpack_sbuffer_destroy(&b->sb);
}

int cluster_cmd_unpack(const void *data, size_t len, cluster_cmd *c)
{
    memset(c, 0, sizeof(*c));
    int rc = unpack_versioned(data, len, &c->unpacked);
    if (rc != TALLY_ok)
        return rc;
    const msgpack_object *m = &c->unpacked.data;
    const msgpack_object *cmds = msgpack_safe_map_get(m, "cmds");
    if (!msgpack_safe_get_str(msgpack_safe_map_get(m, "node"), &c->node) ||
        !msgpack_safe_get_i64(msgpack_safe_map_get(m, "t"), &c->time_ms) || cmds == NULL ||
        cmds->type != MSGPACK_OBJECT_ARRAY || cmds->via.array.size > TALLY_GROUP_COMMANDS_MAX)
        return TALLY_malformed_request;
    c->count = cmds->via.array.size;
    c->cmds = cmds->via.array.ptr;
    for (uint32_t i = 0; i < c->count; i++)
        if (c->cmds[i].type != MSGPACK_OBJECT_BIN)
            return TALLY_malformed_request;
    return TALLY_ok;
}

void cluster_cmd_release(cluster_cmd *c)
{
    msgpack_unpacked_destroy(&c->unpacked);
}

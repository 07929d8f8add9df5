/* placement.c — a handle's placement policy: the URI parameters that choose
 * it and describe each server, and the one call that maps a key to a server
 * (jump hash in shard.c, ketama in placement_ketama.c; see placement.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement.h"
#include "shard.h"
#include "util.h"

static rkv_status say(char *err, size_t err_len, rkv_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static rkv_status say(char *err, size_t err_len, rkv_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return st;
}

static const char *kind_name(rkv_placement k)
{
    return k == RKV_PLACEMENT_KETAMA ? "ketama" : "jump";
}

rkv_status rkv_placement_init(struct rkv_placer *p, rkv_placement kind, char *err, size_t err_len)
{
    memset(p, 0, sizeof *p);
    if ((unsigned)kind > RKV_PLACEMENT_KETAMA)
        return say(err, err_len, RKV_INVALID,
                   "unknown rkv_options.placement %u; use "
                   "RKV_PLACEMENT_DEFAULT, RKV_PLACEMENT_JUMP or RKV_PLACEMENT_KETAMA",
                   (unsigned)kind);
    p->kind = kind;
    return RKV_OK;
}

/* A server's ketama name from a memcached-style address, as libmemcached
 * and twemproxy derive it: "HOST:PORT", or "HOST" alone when PORT is the
 * memcached default 11211. Anything that is not HOST:PORT (a shm path) is
 * its own name. */
static void name_from_address(const char *addr, size_t len, char *name)
{
    char host[RKV_PLACEMENT_NAME_MAX + 1];
    uint16_t port;
    memcpy(name, addr, len);
    name[len] = '\0';
    if (rkv_host_port(name, host, sizeof host, &port) && port == 11211)
        name[strrchr(name, ':') - name] = '\0';
}

/* One "KEY=VALUE" of a URI's parameters into the server or the list's kind. */
static rkv_status take_param(struct rkv_placer *p, struct rkv_placement_server *s, const char *uri,
                             char *param, unsigned *seen, char *err, size_t err_len)
{
    static const char *const keys[] = { "placement", "name", "tcp", "weight" };
    char *eq = strchr(param, '=');
    unsigned k = 0;
    if (eq) {
        *eq = '\0';
        while (k < RKV_ARRAY_SIZE(keys) && strcmp(param, keys[k]) != 0)
            k++;
    }
    if (eq == NULL || eq[1] == '\0' || k == RKV_ARRAY_SIZE(keys))
        return say(err, err_len, RKV_INVALID,
                   "server URI \"%s\": bad parameter \"%s\"; use "
                   "placement=jump|ketama, name=NAME, tcp=HOST:PORT or weight=N",
                   uri, param);
    const char *v = eq + 1;
    if (*seen & 1u << k)
        return say(err, err_len, RKV_INVALID, "server URI \"%s\": %s= given twice", uri, param);
    *seen |= 1u << k;
    if (k == 0) {
        rkv_placement kind = strcmp(v, "ketama") == 0 ? RKV_PLACEMENT_KETAMA
                             : strcmp(v, "jump") == 0 ? RKV_PLACEMENT_JUMP
                                                      : RKV_PLACEMENT_DEFAULT;
        if (kind == RKV_PLACEMENT_DEFAULT)
            return say(err, err_len, RKV_INVALID,
                       "server URI \"%s\": unknown placement \"%s\"; "
                       "use placement=jump or placement=ketama",
                       uri, v);
        if (p->uri_kind != RKV_PLACEMENT_DEFAULT && p->uri_kind != kind)
            return say(err, err_len, RKV_INVALID,
                       "server URI \"%s\": placement=%s, but an earlier "
                       "URI says placement=%s; one list has one placement",
                       uri, v, kind_name(p->uri_kind));
        p->uri_kind = kind;
        return RKV_OK;
    }
    s->ketama_params = true;
    if (k == 3) {
        uint64_t w;
        if (!rkv_parse_u64(v, 1, RKV_PLACEMENT_WEIGHT_MAX, &w))
            return say(err, err_len, RKV_INVALID,
                       "server URI \"%s\": weight \"%s\" is not a "
                       "whole number in 1..%u",
                       uri, v, RKV_PLACEMENT_WEIGHT_MAX);
        s->weight = (uint32_t)w;
        return RKV_OK;
    }
    if ((*seen & 1u << 1) && (*seen & 1u << 2))
        return say(err, err_len, RKV_INVALID,
                   "server URI \"%s\": name= and tcp= both name the "
                   "server; give one",
                   uri);
    char host[RKV_PLACEMENT_NAME_MAX + 1];
    uint16_t port;
    if (k == 2 && !rkv_host_port(v, host, sizeof host, &port))
        return say(err, err_len, RKV_INVALID, "server URI \"%s\": tcp=\"%s\" is not HOST:PORT", uri,
                   v);
    if (strlen(v) > RKV_PLACEMENT_NAME_MAX)
        return say(err, err_len, RKV_INVALID, "server URI \"%s\": %s= is longer than %u bytes", uri,
                   param, RKV_PLACEMENT_NAME_MAX);
    if (k == 1)
        strcpy(s->name, v);
    else
        name_from_address(v, strlen(v), s->name);
    return RKV_OK;
}

rkv_status rkv_placement_add(struct rkv_placer *p, char *uri, char *err, size_t err_len)
{
    struct rkv_placement_server *grown = realloc(p->servers, (p->nservers + 1) * sizeof *grown);
    if (grown == NULL)
        return say(err, err_len, RKV_NO_MEMORY, "out of memory");
    p->servers = grown;
    struct rkv_placement_server *s = memset(&grown[p->nservers], 0, sizeof *s);
    s->weight = 1;
    char *q = strchr(uri, '?');
    if (q) {
        char shown[256], *save = NULL;
        unsigned seen = 0;
        snprintf(shown, sizeof shown, "%s", uri);
        *q = '\0';
        for (char *param = strtok_r(q + 1, "&", &save); param; param = strtok_r(NULL, "&", &save)) {
            rkv_status st = take_param(p, s, shown, param, &seen, err, err_len);
            if (st != RKV_OK)
                return st;
        }
    }
    if (s->name[0] == '\0') {
        const char *sep = strstr(uri, "://");
        const char *addr = sep ? sep + 3 : uri;
        name_from_address(addr, RKV_MIN(strlen(addr), (size_t)RKV_PLACEMENT_NAME_MAX), s->name);
    }
    p->nservers++;
    return RKV_OK;
}

rkv_status rkv_placement_build(struct rkv_placer *p, char *err, size_t err_len)
{
    if (p->kind != RKV_PLACEMENT_DEFAULT && p->uri_kind != RKV_PLACEMENT_DEFAULT &&
        p->kind != p->uri_kind)
        return say(err, err_len, RKV_INVALID,
                   "the URIs say placement=%s but rkv_options.placement "
                   "asks for %s; choose one",
                   kind_name(p->uri_kind), kind_name(p->kind));
    if (p->kind == RKV_PLACEMENT_DEFAULT)
        p->kind = p->uri_kind == RKV_PLACEMENT_KETAMA ? RKV_PLACEMENT_KETAMA : RKV_PLACEMENT_JUMP;
    for (unsigned i = 0; i < p->nservers; i++) {
        if (p->kind == RKV_PLACEMENT_JUMP && p->servers[i].ketama_params)
            return say(err, err_len, RKV_INVALID,
                       "server %u: name=, tcp= and weight= place servers "
                       "on the ketama continuum; add placement=ketama to a URI (or set "
                       "rkv_options.placement)",
                       i);
        for (unsigned j = 0; p->kind == RKV_PLACEMENT_KETAMA && j < i; j++)
            if (strcmp(p->servers[i].name, p->servers[j].name) == 0)
                return say(err, err_len, RKV_INVALID,
                           "servers %u and %u are both named \"%s\"; "
                           "ketama places servers by name, so give each its own (name= or tcp=)",
                           j, i, p->servers[i].name);
    }
    if (p->kind == RKV_PLACEMENT_KETAMA &&
        rkv_ketama_build(p->servers, p->nservers, &p->points, &p->npoints) != RKV_OK)
        return say(err, err_len, RKV_NO_MEMORY, "out of memory for the ketama continuum");
    return RKV_OK;
}

unsigned rkv_placement_pick(const struct rkv_placer *p, const void *key, size_t key_len,
                            uint64_t key_hash)
{
    if (p->nservers <= 1)
        return 0;
    if (p->kind == RKV_PLACEMENT_KETAMA)
        return rkv_ketama_find(p->points, p->npoints, rkv_ketama_hash(key, key_len, 0));
    return rkv_jump_hash(key_hash, p->nservers);
}

void rkv_placement_free(struct rkv_placer *p)
{
    free(p->servers);
    free(p->points);
    memset(p, 0, sizeof *p);
}

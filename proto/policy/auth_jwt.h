/*
 * auth_jwt.h: NGINX Plus's auth_jwt and auth_jwt_key_file (a signed JWT,
 * by default from "Authorization: Bearer", checked against a JWK set read
 * with the config), with corral's auth_jwt_leeway, auth_jwt_issuer and
 * auth_jwt_audience.  Its handler runs in the access phase after
 * auth_basic, and gives $jwt_claim_NAME and $jwt_header_NAME.
 */
#ifndef CORRAL_PROTO_AUTH_JWT_H
#define CORRAL_PROTO_AUTH_JWT_H

#include "conf/directive.h"

#include <stdbool.h>
#include <stdint.h>

struct jwks;
struct auth_jwt_key_source;

/* One level's settings.  Each is inherited by a level that does not
 * write it, shared with the parent (`inherited_*`: not its to free). */
struct auth_jwt_conf {
    char *realm;               /* NULL: off (or unset) */
    char *token;               /* token=$variable; NULL: the Bearer header */
    struct conf_pos realm_pos; /* file NULL: the level does not write auth_jwt */
    struct conf_pos token_pos;
    struct jwks *keys; /* auth_jwt_key_file, loaded when the config is */
    /* auth_jwt_key_request URI: its source, with the set kept from it */
    struct auth_jwt_key_source *key_source;
    struct conf_pos key_request_pos;
    uint32_t key_cache_ms; /* auth_jwt_key_cache; 0: off */
    struct conf_pos key_cache_pos;
    bool inherited_key_source;
    uint32_t leeway_ms;
    struct conf_pos leeway_pos;
    char *issuer, *audience;
    struct conf_pos issuer_pos, audience_pos;
    bool inherited_realm, inherited_keys, inherited_issuer, inherited_audience;
};

/* The module (module.h). */
struct http_module;
extern struct http_module auth_jwt_module;

#endif

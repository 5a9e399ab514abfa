/* gw_auth.h: who a client is: bearer-token tables (hashed, constant-time
 * lookup, reloadable), the WebSocket Origin allow-list, and token hashing.
 *
 * Token file: one `name role[,role...] sha256hex` per line, '#' comments and
 * blank lines ignored. Only SHA-256 digests are stored; a presented token is
 * hashed and compared with every entry using CRYPTO_memcmp. Secrets are never
 * logged and never kept (the presented token is hashed and forgotten).
 *
 * Threading: a tg_gw_tokens table is immutable once built. tg_gw_auth holds
 * the current table and allow-list behind a mutex: lookups may come from any
 * thread (the WebSocket thread checks tokens and Origins), replacements
 * (SIGHUP) from the gateway thread; a lookup sees either the old or the new
 * table, never a mix. */
#ifndef TRACEGATE_GATEWAY_GW_AUTH_H
#define TRACEGATE_GATEWAY_GW_AUTH_H

#include <stddef.h>

#define TG_GW_TOKEN_MAX 4096      /* longest token accepted */
#define TG_GW_PRINCIPAL_MAX 96    /* longest token name */

struct tg_gw_tokens;
struct tg_gw_auth;

#define TG_GW_TOKEN_GEN_LEN 43 /* base64url (no padding) of 32 random bytes */

/* A fresh token: 256 bits from the OpenSSL CSPRNG as base64url without
 * padding ([A-Za-z0-9_-], 43 characters), so it fits a WebSocket
 * subprotocol. Returns 0, or -1 when no randomness is available. */
int tg_gw_token_generate(char out[TG_GW_TOKEN_GEN_LEN + 1]);

/* Lowercase hex SHA-256 of data (out gets 64 chars + NUL). */
void tg_gw_sha256_hex(const void *data, size_t len, char out[65]);

/* Parses a token file's text; `name` is used in error messages
 * ("NAME:LINE: problem"). Returns 0 with *out set, or -1. */
int tg_gw_tokens_parse(const char *text, size_t len, const char *name, struct tg_gw_tokens **out, char *err,
                       size_t errlen);
int tg_gw_tokens_load(const char *path, struct tg_gw_tokens **out, char *err, size_t errlen);
void tg_gw_tokens_free(struct tg_gw_tokens *t);
size_t tg_gw_tokens_count(const struct tg_gw_tokens *t);
/* Roles granted by `token` (0 if none); principal receives the entry's name.
 * Both encodings of a base64 token match its entry: a token written in the
 * base64url alphabet without padding (as it must be to ride in a WebSocket
 * subprotocol) also matches an entry made from its standard-base64 form
 * ('+', '/', '=' padding; the old `head -c 32 /dev/urandom | base64`
 * recipe) and from its padded base64url form. Every entry is compared
 * against every candidate digest, in constant time. */
unsigned tg_gw_tokens_lookup(const struct tg_gw_tokens *t, const char *token, size_t len, char *principal,
                             size_t plen);

struct tg_gw_auth *tg_gw_auth_new(void);
void tg_gw_auth_free(struct tg_gw_auth *a);
/* Replaces the token table (takes ownership; NULL = no tokens). */
void tg_gw_auth_set_tokens(struct tg_gw_auth *a, struct tg_gw_tokens *t);
size_t tg_gw_auth_token_count(struct tg_gw_auth *a);
unsigned tg_gw_auth_lookup(struct tg_gw_auth *a, const char *token, size_t len, char *principal, size_t plen);
/* Replaces the extra allowed Origins (copied). Perfetto's defaults
 * (https://ui.perfetto.dev, http://localhost:10000, http://127.0.0.1:10000)
 * are always allowed. Returns 0 or -1 (allocation). */
int tg_gw_auth_set_origins(struct tg_gw_auth *a, const char *const *origins, size_t n);
/* Exact match, case-insensitive, ignoring one trailing '/'. NULL/"" = no. */
int tg_gw_auth_origin_allowed(struct tg_gw_auth *a, const char *origin);

#endif

/* gw_adb_addr.h: where the local ADB server is, in the syntax adb itself
 * uses (ADB_SERVER_SOCKET, `adb -L`), so tracegated and websocket_bridge
 * read the same environment the same way.
 *
 * Specs: "tcp:PORT" (127.0.0.1), "tcp:HOST:PORT", "tcp:[V6]:PORT",
 * "localfilesystem:PATH", "localabstract:NAME"; tracegate's own forms
 * "tcp://HOST:PORT", "unix:PATH" and "HOST:PORT" are accepted too.
 *
 * Threading: pure apart from name resolution (getaddrinfo): call at setup. */
#ifndef TRACEGATE_GATEWAY_GW_ADB_ADDR_H
#define TRACEGATE_GATEWAY_GW_ADB_ADDR_H

#include <stddef.h>

#include "tracegate/addr.h"

#define TG_GW_ADB_DEFAULT_SERVER "tcp:127.0.0.1:5037"

/* Parses spec into out. Returns 0, or -1 with a message. */
int tg_gw_adb_addr_parse(const char *spec, struct tg_addr *out, char *err, size_t errlen);

/* The spec that applies: option (the adb-server option) when set, else a
 * non-empty $ADB_SERVER_SOCKET, else TG_GW_ADB_DEFAULT_SERVER. *source names
 * which ("adb-server", "ADB_SERVER_SOCKET", "default"). */
const char *tg_gw_adb_addr_choose(const char *option, const char **source);

#endif

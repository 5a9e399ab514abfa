/* gw_adb_addr.c: ADB server socket specs (adb's tcp:/localfilesystem:/localabstract: forms) to addresses (see gw_adb_addr.h). */
#include "gw_adb_addr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tracegate/errbuf.h"

static int all_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

int tg_gw_adb_addr_parse(const char *spec, struct tg_addr *out, char *err, size_t errlen)
{
    char buf[600];
    if (!spec || !*spec)
        return tg_errf(err, errlen, "empty ADB server address");
    if (strlen(spec) >= 512)
        return tg_errf(err, errlen, "ADB server address too long");
    if (!strncmp(spec, "tcp://", 6) || !strncmp(spec, "unix:", 5)) {
        snprintf(buf, sizeof buf, "%s", spec);
    } else if (!strncmp(spec, "tcp:", 4)) {
        const char *r = spec + 4;
        if (all_digits(r))
            snprintf(buf, sizeof buf, "127.0.0.1:%s", r); /* adb: tcp:PORT is this host */
        else if (strchr(r, ':'))
            snprintf(buf, sizeof buf, "%s", r);
        else
            return tg_errf(err, errlen, "'%s': expected tcp:PORT or tcp:HOST:PORT", spec);
        const char *colon = strrchr(buf, ':');
        if (!all_digits(colon + 1))
            return tg_errf(err, errlen, "'%s': the port must be a number", spec);
    } else if (!strncmp(spec, "localfilesystem:", 16)) {
        if (!spec[16])
            return tg_errf(err, errlen, "'%s': expected localfilesystem:PATH", spec);
        snprintf(buf, sizeof buf, "unix:%s", spec + 16);
    } else if (!strncmp(spec, "localabstract:", 14)) {
        if (!spec[14])
            return tg_errf(err, errlen, "'%s': expected localabstract:NAME", spec);
        snprintf(buf, sizeof buf, "unix:@%s", spec + 14);
    } else {
        const char *colon = strrchr(spec, ':');
        if (!colon || !all_digits(colon + 1) || strstr(spec, "://"))
            return tg_errf(err, errlen,
                           "'%s' is not an ADB server address (tcp:PORT, tcp:HOST:PORT, localfilesystem:PATH, "
                           "localabstract:NAME)",
                           spec);
        snprintf(buf, sizeof buf, "%s", spec);
    }
    char e2[256];
    if (tg_addr_parse(buf, out, e2, sizeof e2) != 0)
        return tg_errf(err, errlen, "'%s': %s", spec, e2);
    return 0;
}

const char *tg_gw_adb_addr_choose(const char *option, const char **source)
{
    if (option && *option) {
        *source = "adb-server";
        return option;
    }
    const char *env = getenv("ADB_SERVER_SOCKET");
    if (env && *env) {
        *source = "ADB_SERVER_SOCKET";
        return env;
    }
    *source = "default";
    return TG_GW_ADB_DEFAULT_SERVER;
}

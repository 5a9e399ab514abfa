/* magic.c: the table of known KCDATA begin magics, their names, and the rule a new magic must
 * follow so that a reader can tell a byte-swapped (big-endian) buffer from a foreign one. */
#include "kcdata/kcdata_int.h"

struct magic_name {
    uint32_t magic;
    const char *name;
};

static const struct magic_name k_magics[] = {
    {TG_KCDATA_MAGIC, "tracegate"},
    {TG_KCDATA_MAGIC_CRASHINFO, "crash info"},
    {TG_KCDATA_MAGIC_STACKSHOT, "stackshot"},
    {TG_KCDATA_MAGIC_DELTA_STACKSHOT, "delta stackshot"},
    {TG_KCDATA_MAGIC_COMPRESSED, "compressed"},
    {TG_KCDATA_MAGIC_BTINFO, "btinfo"},
    {TG_KCDATA_MAGIC_OS_REASON, "os reason"},
    {TG_KCDATA_MAGIC_XNUPOST, "xnupost"},
};

const char *tg_kcdata_magic_name(uint32_t magic)
{
    for (size_t i = 0; i < sizeof k_magics / sizeof k_magics[0]; i++)
        if (k_magics[i].magic == magic)
            return k_magics[i].name;
    return NULL;
}

int tg_kcdata_magic_usable(uint32_t magic)
{
    uint32_t swapped = tg_kc_bswap32(magic);
    if (magic <= TG_KCDATA_TYPE_RESERVED_MAX || magic == TG_KCDATA_BUFFER_END || swapped == magic ||
        swapped == TG_KCDATA_BUFFER_END)
        return 0;
    for (size_t i = 0; i < sizeof k_magics / sizeof k_magics[0]; i++)
        if (k_magics[i].magic == swapped)
            return 0;
    return 1;
}

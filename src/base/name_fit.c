/* name_fit.c: names in fixed-size buffers, a digest instead of a cut (see name_fit.h). */
#include "base/name_fit.h"

#include <openssl/evp.h>
#include <string.h>

#include "base/hex.h"

int tg_name_fit(char *out, size_t cap, const char *prefix, const char *name)
{
    if (cap <= 2 * TG_NAME_FIT_DIGEST_LEN) {
        if (cap)
            out[0] = '\0';
        return -1;
    }
    if (!prefix)
        prefix = "";
    if (!name)
        name = "";
    size_t pl = strlen(prefix), nl = strlen(name);
    size_t literal_max = cap - 1 - TG_NAME_FIT_DIGEST_LEN - 1;
    if (pl + nl <= literal_max) {
        memcpy(out, prefix, pl);
        memcpy(out + pl, name, nl);
        out[pl + nl] = '\0';
        return 0;
    }
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 && EVP_DigestUpdate(ctx, prefix, pl) == 1 &&
             EVP_DigestUpdate(ctx, name, nl) == 1 && EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 && mdlen >= 16;
    EVP_MD_CTX_free(ctx);
    if (!ok) { /* no digest: refuse rather than cut (a cut name could be someone else's) */
        out[0] = '\0';
        return -1;
    }
    size_t head = cap - 1 - TG_NAME_FIT_DIGEST_LEN; /* characters of prefix+name kept */
    size_t from_prefix = pl < head ? pl : head;
    memcpy(out, prefix, from_prefix);
    memcpy(out + from_prefix, name, head - from_prefix);
    out[head] = '~';
    tg_hex_encode(out + head + 1, md, 16);
    return 1;
}

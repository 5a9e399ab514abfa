/* node_name.c: the node name syntax (see base/node_name.h). */
#include "base/node_name.h"

#include <string.h>

int tg_node_name_chars_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return 0;
    }
    return 1;
}

int tg_node_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > TG_NODE_NAME_MAX || name[0] == '@' || !strcmp(name, ".") || !strcmp(name, ".."))
        return 0;
    return tg_node_name_chars_ok(name, n);
}

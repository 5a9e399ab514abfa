/* tracectl_kcdata.c: `tracectl kcdata FILE`: prints any KCDATA buffer (a node descriptor, a stats
 * snapshot, or another writer's buffer) with the library's text or JSON printer. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "tracectl.h"
#include "tracegate/kcdata.h"

static void kcdata_usage(FILE *out)
{
    fprintf(out, "usage: tracectl kcdata FILE [--json] [--offsets] [--hex]\n\n"
                 "Prints a KCDATA buffer ('-' reads stdin): described items, type definitions and items\n"
                 "of defined types field by field, containers indented, anything else in hex.\n\n"
                 "  --json      one JSON document instead of text\n"
                 "  --offsets   prefix each item with its byte offset\n"
                 "  --hex       also hex-dump the payload of decoded items\n");
}

int tc_cmd_kcdata(const struct tc_opts *opts, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"offsets", no_argument, NULL, 'o'},
        {"hex", no_argument, NULL, 'x'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    (void)opts;
    int json = 0, c;
    unsigned flags = 0;
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'j': json = 1; break;
        case 'o': flags |= TG_KCDATA_PRINT_OFFSETS; break;
        case 'x': flags |= TG_KCDATA_PRINT_HEX; break;
        case 'h': kcdata_usage(stdout); return 0;
        default: kcdata_usage(stderr); return 2;
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "tracectl kcdata: %s\n", argc - optind < 1 ? "missing FILE" : "expected a single FILE");
        kcdata_usage(stderr);
        return 2;
    }
    const char *path = argv[optind];
    uint8_t *data;
    size_t len;
    char err[512];
    if (tc_trace_file_load(path, &data, &len, err, sizeof err) != 0) {
        fprintf(stderr, "tracectl kcdata: %s\n", err);
        return 1;
    }
    int rc = json ? tg_kcdata_print_json(stdout, data, len, err, sizeof err)
                  : tg_kcdata_print(stdout, data, len, flags, err, sizeof err);
    free(data);
    fflush(stdout);
    if (rc != 0) {
        fprintf(stderr, "tracectl kcdata: %s: %s\n", path, err);
        return 1;
    }
    return 0;
}

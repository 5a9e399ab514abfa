/* tracectl.h: the tracectl commands (each in its own file) and shared helpers. */
#ifndef TRACEGATE_TRACECTL_H
#define TRACEGATE_TRACECTL_H

#include "tracectl_rpc.h"

int tc_cmd_query(const struct tc_opts *opts, int argc, char **argv);

#endif

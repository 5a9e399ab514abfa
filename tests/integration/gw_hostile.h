/* gw_hostile.h: the `hostile` command of gw_testclient (gw_hostile.c): one connection that sends
 * something a well-behaved client never would, then waits for the gateway to close it.
 * Single-threaded; the caller owns nothing it returns. */
#ifndef TRACEGATE_TESTS_GW_HOSTILE_H
#define TRACEGATE_TESTS_GW_HOSTILE_H

/* Runs attack `kind` against addr (HOST:PORT or a UNIX path) and prints the outcome.
 * Returns 0 if the gateway closed the connection, 1 if it did not within the (scaled) timeout,
 * 2 on a usage or connect error. */
int gw_hostile_main(const char *kind, const char *addr, int timeout_ms);

#endif

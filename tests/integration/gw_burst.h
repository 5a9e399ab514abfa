/* gw_burst.h: the `burst` command of gw_testclient (gw_burst.c): N connects at once, each then
 * binding ConsumerPort and making one call. Single-threaded; the caller owns nothing it returns. */
#ifndef TRACEGATE_TESTS_GW_BURST_H
#define TRACEGATE_TESTS_GW_BURST_H

/* Runs the burst against addr (HOST:PORT or a UNIX path) and prints the outcome counts.
 * Returns 0 if all `count` calls were answered, 1 if not, 2 on a usage or setup error. */
int gw_burst_main(const char *addr, int count, const char *method, int timeout_ms);

#endif

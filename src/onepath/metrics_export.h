/* metrics_export.h: the asynchronous metrics NDJSON exporter: its own thread writes one line per
 * metric every flush period (and once more at stop). Metric writers never wait for it: it holds
 * the registry's read lock only while rendering into memory, never while writing the file. */
#ifndef TG_ONEPATH_METRICS_EXPORT_H
#define TG_ONEPATH_METRICS_EXPORT_H

struct tg_op_metrics_exporter;

/* NULL (*err = ONEPATH_ERR_*) on failure. */
struct tg_op_metrics_exporter *tg_op_metrics_exporter_start(const char *path, unsigned flush_ms,
                                                            const char *service_name, const char *host_name,
                                                            int *err);
/* Final flush (metrics must still be enabled for it to see them), join, close, free. */
void tg_op_metrics_exporter_stop(struct tg_op_metrics_exporter *e);

#endif

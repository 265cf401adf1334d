/* dpdk_none.c: the DPDK backend's entry points in a build without libdpdk-dev: each says how to get it. */
#include <errno.h>
#include <stdio.h>

#include <flowplane/dev.h>

bool fp_dpdk_available(void) { return false; }

struct fp_dpdk *fp_dpdk_open(const struct fp_dpdk_config *cfg, char *err, size_t errlen)
{
	(void)cfg;
	snprintf(err, errlen, "this build has no DPDK backend: install libdpdk-dev and the PMDs "
		 "(scripts/bootstrap does) and rebuild (./flowplane build)");
	errno = ENOTSUP;
	return NULL;
}

struct fp_dpdk *fp_dpdk_open_next(const struct fp_dpdk *prev, const struct fp_dpdk_config *cfg,
				  char *err, size_t errlen)
{
	(void)prev;
	return fp_dpdk_open(cfg, err, errlen);
}

struct fp_devq *fp_dpdk_queue_open(struct fp_dpdk *d, unsigned q, char *err, size_t errlen)
{
	(void)d;
	(void)q;
	snprintf(err, errlen, "no DPDK backend in this build");
	errno = ENOTSUP;
	return NULL;
}

const char *fp_dpdk_driver(const struct fp_dpdk *d) { (void)d; return "none"; }

const char *fp_dpdk_copy_why(const struct fp_dpdk *d) { (void)d; return "no DPDK"; }

const uint16_t *fp_dpdk_steer_table(const struct fp_dpdk *d) { (void)d; return NULL; }

const char *fp_dpdk_rss_why(const struct fp_dpdk *d) { (void)d; return ""; }

unsigned fp_dpdk_rss_entries(const struct fp_dpdk *d) { (void)d; return 0; }

void fp_dpdk_close(struct fp_dpdk *d) { (void)d; }

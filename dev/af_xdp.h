/* af_xdp.h: private to dev/: the AF_XDP interface, shared by its two halves. */
#pragma once

#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>

#include <flowplane/dev.h>

/*
 * AF_XDP lives in two files: xdp_prog.c is the interface side (privileges, interface
 * facts, the filter program: load, attach, evict a stale one, detach) and af_xdp.c the
 * queue side (UMEM, pool, socket, the burst calls). Each worker may open and close its own
 * queue on its own thread (they share only the socket map and open_queues, kept atomic);
 * fp_xdp_open and fp_xdp_close run alone, before the first queue and after the last.
 */
struct fp_xdp {
	struct fp_xdp_config cfg;  /* defaults filled in */
	char ifname[IF_NAMESIZE];
	int ifindex;
	struct fp_eth_addr mac;
	uint16_t mtu;
	unsigned n_queues, open_queues;  /* open_queues: atomic */
	uint32_t attach_flags;     /* XDP_FLAGS_DRV_MODE or XDP_FLAGS_SKB_MODE */
	struct bpf_object *obj;
	int prog_fd, xsks_fd;      /* the filter and its XSKMAP (socket per rx queue) */
	int arps_fd;               /* its ring of other hosts' ARP frames (queue 0 reads it) */
};

/* The one-line error for the caller, when it gave a buffer. */
static inline __attribute__((format(printf, 3, 4)))
void xdp_errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

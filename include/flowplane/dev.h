/* dev.h: packet I/O backends behind one small ops table (AF_XDP, the in-process pair). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <flowplane/mbuf.h>
#include <flowplane/pool.h>
#include <flowplane/wire.h>

/*
 * A device queue is one receive/transmit queue pair owned by one worker. Its buffers come
 * from the queue's own pool (for AF_XDP the pool's data region is the UMEM, so a frame's
 * UMEM address and its mbuf are one division apart); the worker's stack allocates from
 * q->cache, so a frame it builds can be transmitted without a copy.
 *
 * The loop's use, all on the owning worker's thread:
 *
 *   n = q->ops->rx_burst(q, frames, B);   received frames; the caller owns them
 *   k = q->ops->tx_burst(q, frames, n);   the device takes frames[0..k); the caller keeps
 *                                         (and may retry or free) frames[k..n)
 *   q->ops->reclaim(q);                   free what the device finished sending; top up
 *                                         the receive buffers (AF_XDP: fill ring)
 *   fd = q->ops->wait_fd(q);              poll() it for POLLIN to sleep until a frame
 *                                         arrives; -1 when the device cannot sleep. Call
 *                                         it before each sleep (the pair arms its
 *                                         wake-up there), then check rx_ready()
 */
struct fp_devq;

struct fp_dev_stats {
	uint64_t rx_frames, rx_bytes, tx_frames, tx_bytes;
	uint64_t rx_dropped;          /* device dropped: no buffer/ring full (AF_XDP: kernel's
				       * XDP_STATISTICS rx_dropped + rx_ring_full) */
	uint64_t rx_fill_empty;       /* polls that found no receive buffer posted (DPDK,
				       * zero-copy: the PMD's allocations our pool refused) */
	uint64_t tx_full;             /* frames tx_burst refused (ring full) */
	uint64_t tx_dropped;          /* frames the device took and then dropped (DPDK: the
				       * PMD's oerrors) */
	uint64_t tx_wakeups;          /* sendto() kicks (need_wakeup) */
	uint64_t rx_wakeups;          /* recvfrom()/poll kicks for the fill ring */
	uint64_t invalid_descs;       /* rx + tx invalid descriptors the kernel reported */
};

struct fp_dev_ops {
	const char *name;
	unsigned (*rx_burst)(struct fp_devq *q, struct fp_mbuf **out, unsigned max);
	unsigned (*tx_burst)(struct fp_devq *q, struct fp_mbuf **frames, unsigned n);
	unsigned (*reclaim)(struct fp_devq *q);   /* frames freed */
	int (*wait_fd)(struct fp_devq *q);
	unsigned (*rx_ready)(struct fp_devq *q);  /* frames waiting right now (queue depth) */
	/* The same, asked by another thread than the queue's owner (a thief deciding whether
	 * to interrupt a busy home): read-only, a hint that may be stale at once. NULL where
	 * the device cannot say without the owner's state (DPDK). */
	unsigned (*rx_waiting)(const struct fp_devq *q);
	void (*stats)(struct fp_devq *q, struct fp_dev_stats *out);
	void (*close)(struct fp_devq *q);         /* frees every buffer it holds, then q */
};

struct fp_devq {
	const struct fp_dev_ops *ops;
	struct fp_pool *pool;          /* the queue's buffers (for AF_XDP, over the UMEM) */
	struct fp_pool_cache cache;    /* the owning worker's cache on @pool */
	struct fp_eth_addr mac;        /* the interface's address */
	uint16_t queue_id;
	uint16_t mtu;                  /* the interface's IP MTU */
	uint32_t rx_bufs;              /* buffers of @pool it keeps posted for receive */
	bool zerocopy;                 /* AF_XDP bound in zero-copy mode */
	bool native;                   /* AF_XDP: the XDP program runs in driver (native) mode */
};

/* ---- AF_XDP ---- */

enum fp_xdp_mode {
	FP_XDP_AUTO = 0,   /* native; copy or zero-copy as the driver allows */
	FP_XDP_NATIVE,     /* native only (fail if the driver has no XDP support) */
	FP_XDP_SKB,        /* generic (skb) mode: works on any interface, slower */
};

struct fp_xdp_config {
	const char *ifname;
	uint32_t ipv4;            /* frames to this address (and ARP for it) go to flowplane;
				   * everything else passes to the kernel */
	enum fp_xdp_mode mode;
	bool force_copy;          /* XDP_COPY even where zero-copy would work */
	bool force_zerocopy;      /* XDP_ZEROCOPY or fail */
	uint32_t frames;          /* UMEM frames per queue (default 4096) */
	uint32_t frame_size;      /* 2048 or 4096 (default 2048) */
	uint32_t ring_size;       /* rx, tx, fill and completion ring entries (default 2048) */
	bool no_need_wakeup;      /* do not ask for XDP_USE_NEED_WAKEUP */
	/* optional: told the interface's queue count before anything is attached; non-zero
	 * (a negative errno, with one line in @err) refuses the interface */
	int (*check_queues)(void *arg, unsigned n_queues, char *err, size_t errlen);
	void *check_arg;
};

struct fp_xdp;  /* the interface: the XDP program and the socket map */

/*
 * Check privileges, find the interface, load the filter program and attach it.
 * NULL on failure, with one line in @err saying what to do, and errno set:
 *   EPERM   not root / no CAP_NET_ADMIN and CAP_BPF
 *   ENODEV  no such interface
 *   EOPNOTSUPP / other: XDP attach refused (the line names the flag to try)
 */
struct fp_xdp *fp_xdp_open(const struct fp_xdp_config *cfg, char *err, size_t errlen);

/* Number of combined/rx queues the interface has. */
unsigned fp_xdp_queues(const struct fp_xdp *x);

/* Create the AF_XDP socket, UMEM and pool for queue @queue_id and register it with the
 * program. NULL with @err (ERANGE: queue index out of range, naming the count). */
struct fp_devq *fp_xdp_queue_open(struct fp_xdp *x, unsigned queue_id, char *err, size_t errlen);

/* Detach the program (every queue must be closed first) and free @x. */
void fp_xdp_close(struct fp_xdp *x);

/* ---- the NIC's own steering (dev/nic_rss.c) ---- */

/* How ethtool commands reach a device: fp_ethtool_ioctl with @arg the interface's name
 * (SIOCETHTOOL), or a test's fake NIC. @cmd is a struct ethtool_*; 0 or -errno. */
struct fp_ethtool {
	int (*call)(void *arg, void *cmd);
	void *arg;
};
int fp_ethtool_ioctl(void *ifname, void *cmd);

struct fp_nic_rss;   /* what the NIC had, to put back */

/*
 * Make the NIC steer as rt/steer.c's flow groups do (IX §4.4): Toeplitz with @key (40
 * bytes, repeated over a longer key), IPv4 TCP and UDP hashed over addresses and ports,
 * and indirection entry i to queue_of_group[i % FP_RSS_GROUPS] (the table must be a
 * multiple of 128 entries). The
 * table is read back. NULL, with errno and one line in @why saying what the NIC lacks,
 * when it cannot (nothing is left changed then). UDP left on addresses only is not a
 * refusal: fp_nic_rss_udp() says so.
 */
struct fp_nic_rss *fp_nic_rss_program(const struct fp_ethtool *io, const uint8_t *key,
				      const uint16_t queue_of_group[], char *why, size_t len);
/* Put back the table, key, function and hash fields the NIC had; free @s (NULL: no-op). */
void fp_nic_rss_restore(struct fp_nic_rss *s);
unsigned fp_nic_rss_entries(const struct fp_nic_rss *s);   /* its table's size */
bool fp_nic_rss_udp(const struct fp_nic_rss *s);           /* UDP hashed on ports too */

/* ---- pair: two in-process queues joined back to back (tests, unprivileged) ---- */

/*
 * Frames transmitted on one end arrive on the other, copied into the receiver's pool
 * (like a NIC's DMA), through a ring, so the two ends may be driven by two threads.
 * Each end has its own pool of @frames buffers of @frame_size bytes and a made-up MAC
 * (02:00:00:00:00:0N). wait_fd is an eventfd the other end signals on transmit.
 */
int fp_pair_create(uint32_t frames, uint32_t frame_size, struct fp_devq *ends[2]);

/* ---- DPDK (dev/dpdk.c; absent from a build without libdpdk-dev) ---- */

/*
 * One DPDK port with a queue pair per worker, on Debian's DPDK 22.11: a vdev (net_memif,
 * net_af_packet, net_af_xdp, net_tap; the EAL runs with --no-pci, so no bound NIC in
 * this step: its DMA would also need our pool registered). Zero-copy where the PMD reads
 * and writes its mbufs' buffers only by address (memif in copy mode, af_packet, tap): the
 * queue's pool is the PMD's mempool too (dev/dpdk.c, "zero-copy"), so a received frame is
 * handed to the stack where the PMD put it and a frame the stack built goes to the PMD as
 * it is. Elsewhere (af_xdp's PMD keeps its own UMEM), or with @copy, frames are copied
 * between DPDK's mbufs and the queue's pool. No receive interrupt: wait_fd() is -1, so an
 * idle worker naps (rt's --nap-us).
 */
struct fp_dpdk_config {
	const char *args;         /* EAL arguments, space-separated: at least the device
				   * (--vdev=...); the defaults come first (dev/dpdk.c) */
	unsigned n_queues;        /* rx/tx queue pairs: one per worker */
	uint32_t frames;          /* our buffers per queue (default 4096) */
	uint32_t ring_size;       /* rx and tx descriptors per queue (default 1024) */
	bool copy;                /* copy frames to and from DPDK's own mbufs even where
				   * zero-copy works (to compare the two) */
};

struct fp_dpdk;

/* Compiled in? Without it, fp_dpdk_open fails with a line saying how to get it. */
bool fp_dpdk_available(void);
/* Initialise the EAL (once per process), configure and start the first port. NULL with
 * one line in @err. */
struct fp_dpdk *fp_dpdk_open(const struct fp_dpdk_config *cfg, char *err, size_t errlen);
/* The next port of the EAL that fp_dpdk_open started (a second --vdev in its args), with
 * @cfg's queues and sizes: two ends of a link in one process (bench/dev_cost.c). Close it
 * before the first. NULL with @err. */
struct fp_dpdk *fp_dpdk_open_next(const struct fp_dpdk *prev, const struct fp_dpdk_config *cfg,
				  char *err, size_t errlen);
/* Queue @q's device queue, for the calling (worker) thread. */
struct fp_devq *fp_dpdk_queue_open(struct fp_dpdk *d, unsigned q, char *err, size_t errlen);
/* The port's driver name ("net_memif"), for the startup line. */
const char *fp_dpdk_driver(const struct fp_dpdk *d);

/* NULL when the port's frames are not copied, else why they are, for the startup line. */
const char *fp_dpdk_copy_why(const struct fp_dpdk *d);
/* With several queues, RSS where the PMD has it (dpdk.c, port_rss_conf): the group ->
 * queue table the port steers by (with fp_rss_key_symmetric), or NULL when it does not;
 * then why not ("" with one queue), and the port's table size (0 without). */
const uint16_t *fp_dpdk_steer_table(const struct fp_dpdk *d);
const char *fp_dpdk_rss_why(const struct fp_dpdk *d);
unsigned fp_dpdk_rss_entries(const struct fp_dpdk *d);
/* Stop the port (every queue closed first) and clean up the EAL. */
void fp_dpdk_close(struct fp_dpdk *d);

/* run.c: fp_rt_run(): the runtime's options, startup steps, worker threads, pinning and signals. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <limits.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <flowplane/clock.h>
#include <flowplane/rss.h>

#include "defs.h"

/* ---- configuration ---- */

void fp_rt_config_init(struct fp_rt_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->transport = FP_TRANSPORT_KERNEL;
	cfg->kernel_io = FP_KERNEL_IO_AUTO;
	cfg->prefix_len = 24;
	cfg->n_workers = 1;
	for (unsigned i = 0; i < FP_RT_MAX_WORKERS; i++)
		cfg->cores[i] = (int)i;
	cfg->batch = FP_RT_DEFAULT_BATCH;
	cfg->idle = FP_IDLE_SLEEP;
	cfg->spin_us = FP_RT_DEFAULT_SPIN_US;
	cfg->ipi_after_us = 10;
	cfg->flush_us = FP_RT_FLUSH_AUTO;
	cfg->nap_us = FP_RT_DEFAULT_NAP_US;
	cfg->burst_idle_us = FP_RT_DEFAULT_BURST_IDLE_US;
	cfg->xdp.mode = FP_XDP_AUTO;
}

const char fp_rt_options_help[] =
	"  --net kernel|xdp|dpdk transport: Linux sockets (default), AF_XDP (root) or a DPDK\n"
	"                        port (--dpdk; idle workers nap, --nap-us)\n"
	"  --dpdk 'EAL ARGS'     dpdk: the device and other EAL arguments, e.g.\n"
	"                        --vdev=net_memif0,role=server,socket=/run/fp.sock (implies\n"
	"                        --net dpdk; huge pages are used when free)\n"
	"  --dpdk-copy yes|no    dpdk: copy frames to and from DPDK's own mbufs even where\n"
	"                        zero-copy works (memif, af_packet, tap; default no)\n"
	"  --kernel-io IO        kernel sockets via auto (io_uring, else epoll), uring, epoll\n"
	"  --kernel-steer S      kernel, several workers: a connection goes to a worker by the\n"
	"                        kernel's reuseport hash (hash, the default) or to the worker\n"
	"                        pinned to the CPU that received it (cpu: SO_INCOMING_CPU)\n"
	"  --if IFNAME           interface for AF_XDP (implies --net xdp)\n"
	"  --ip A.B.C.D[/N]      our address (xdp: required, prefix default 24)\n"
	"  --gw A.B.C.D          next hop for addresses off the subnet\n"
	"  --workers N           worker threads, one per core (default 1)\n"
	"  --cores LIST          cores to pin workers to: 0,2 or 0-3 (default 0..N-1)\n"
	"  --queue-base Q        xdp: worker i owns queue Q+i (default 0)\n"
	"  --steer groups|queue  xdp, several workers: a frame goes to the worker that owns\n"
	"                        its flow's group (IX's 128 flow groups by the symmetric\n"
	"                        Toeplitz hash; frames arriving elsewhere are handed over;\n"
	"                        the default) or stays with the queue it arrived on\n"
	"  --steer-weights LIST  groups per worker in proportion, e.g. 1,1,2 (ethtool -X\n"
	"                        weight; 0 gives a worker none; default equal)\n"
	"  --nic-steer MODE      groups: set the NIC's RSS key, TCP/UDP hash fields and\n"
	"                        indirection table so each group's frames arrive on its\n"
	"                        worker's queue, put back at exit: where the NIC can (auto,\n"
	"                        the default; the startup line says which), or stop if it\n"
	"                        cannot (on), or leave the NIC alone (off). A veth cannot.\n"
	"  --batch B             frames per stack pass, 1..1024 (default 64)\n"
	"  --idle MODE           when idle: poll (keep polling), sleep (spin --spin-us, then\n"
	"                        sleep; the default) or adaptive (spin only as long as the\n"
	"                        worker recently worked, at most --spin-us: CPU follows load)\n"
	"  --sched part|steal    a flow's events run on its own worker only (part, IX's,\n"
	"                        the default) or on any idle worker (steal, ZygOS's; its\n"
	"                        workers poll; for steal-safe applications: fp-kv,\n"
	"                        fp-echo server, spin --native; and user-level threads:\n"
	"                        spin --threads, fp-kv --style threads)\n"
	"  --notify poll|ipi     steal: how a home busy in a long handler learns that\n"
	"                        frames wait for it and that its flows came back from a\n"
	"                        thief: at its next round (poll, the default), or by an\n"
	"                        interrupt (ipi: a signal to its thread, ZygOS's IPI; its\n"
	"                        handler runs the stack on what it safely can; xdp, pair\n"
	"                        and dpdk)\n"
	"  --ipi-after-us US     ipi: interrupt a handler only once it has run this long\n"
	"                        (default 10)\n"
	"  --flush-us US         part: the handler gets a round's requests in chunks, and\n"
	"                        what it sent leaves once it has run this long since the\n"
	"                        last send, not at the round's end (0: IX's batching; each\n"
	"                        send is a tx burst, on kernel an io_uring_enter); default\n"
	"                        10 on dpdk, where a send is a ring write, 0 elsewhere\n"
	"  --burst K             steal, xdp: the last K workers are burstable: they own no\n"
	"                        flow group, steal the others' work, and run only while the\n"
	"                        core allocator (fp-ctl alloc) grants them their core; an\n"
	"                        --idle given explicitly is then the homes' (sleep: an idle\n"
	"                        run gives every core back)\n"
	"  --burst-idle-us US    a burstable worker idle this long parks (default 20)\n"
	"  --park-prio P         flow groups: a worker parked by fp-ctl sleeps at SCHED_FIFO\n"
	"                        priority P (1..99; root or RLIMIT_RTPRIO), so what its\n"
	"                        queue still receives is handed over at once even while\n"
	"                        its core runs other work; back to normal when unparked\n"
	"                        (default: off)\n"
	"  --park-queue MODE     flow groups: a worker parked by fp-ctl lends its device\n"
	"                        queue to a polling worker, which polls it with its own\n"
	"                        until the unpark (lend, the default), or keeps polling it\n"
	"                        itself, waking for every frame (keep)\n"
	"  --spin-us US          sleep: spin this long before sleeping; adaptive: spin at\n"
	"                        most this long (default 200)\n"
	"  --nap-us US           dpdk (no receive interrupt): an idle worker sleeps in naps\n"
	"                        of at most this long, polling between; a frame may wait\n"
	"                        that long after an idle spell (default 100; 0: poll)\n"
	"  --xdp-mode MODE       auto, native or skb (default auto)\n"
	"  --xdp-copy yes|no     xdp: force copy mode\n"
	"  --xdp-zerocopy yes|no xdp: require zero-copy mode (fail without it)\n"
	"  --umem-frames N       xdp: UMEM frames per queue; dpdk: buffers per queue (default\n"
	"                        4096 both)\n"
	"  --rx-drop P           drop this fraction (0..1) of received frames (tests)\n"
	"  --rx-reorder P        hold this fraction (0..1) of received frames back until after\n"
	"                        the next burst's: out of order, not lost (tests)\n"
	"  --seed N              seed for --rx-drop and --rx-reorder (default: from the clock)\n"
	"  --rcv-buf BYTES       TCP receive window per connection (default 256K)\n"
	"  --max-conns N         TCP connections per worker (default 65536)\n"
	"  --rto-min-us US       xdp: TCP's retransmit timeout floor (default 5000)\n"
	"  --peer-delack-us US   xdp: how long a peer may delay its ACK of a flight under two\n"
	"                        segments before it is resent (default 200000: Linux's\n"
	"                        worst case; 0: the peer ACKs at once)\n"
	"  --stats NAME|none     stats segment /dev/shm/flowplane-NAME (default: pid)\n";

const char *const fp_rt_option_names[] = {
	"net", "kernel-io", "kernel-steer", "if", "ip", "gw", "workers", "cores", "queue-base", "steer",
	"steer-weights", "nic-steer", "batch", "idle",
	"sched", "notify", "ipi-after-us", "flush-us", "burst", "burst-idle-us", "park-prio", "park-queue", "spin-us", "nap-us", "xdp-mode", "xdp-copy", "xdp-zerocopy", "umem-frames", "rx-drop", "rx-reorder", "seed",
	"rcv-buf", "max-conns", "rto-min-us", "peer-delack-us", "stats", "dpdk", "dpdk-copy", NULL,
};

const char *fp_rt_transport_name(enum fp_transport t)
{
	static const char *const names[] = { "kernel", "xdp", "pair", "dpdk" };

	return (unsigned)t < 4 ? names[t] : "?";
}

struct option *fp_rt_getopt_table(const struct option *own)
{
	size_t n_own = 0, n_rt = 0;
	struct option *all;

	while (own[n_own].name)
		n_own++;
	while (fp_rt_option_names[n_rt])
		n_rt++;
	all = calloc(n_own + n_rt + 1, sizeof(*all));
	if (!all)
		return NULL;
	memcpy(all, own, n_own * sizeof(*all));
	for (size_t i = 0; i < n_rt; i++)
		all[n_own + i] = (struct option){ fp_rt_option_names[i], required_argument, NULL,
						  FP_RT_OPT_BASE + (int)i };
	return all;
}

/* Unsigned decimal (or 0x hex) in [lo, hi], with an optional K/M/G suffix when @scaled. */
static int opt_u64(const char *opt, const char *val, uint64_t lo, uint64_t hi, bool scaled,
		   uint64_t *out, char *err, size_t errlen)
{
	char *end;
	uint64_t v;

	errno = 0;
	v = strtoull(val, &end, 0);
	if (scaled && end != val && *end && !end[1]) {
		unsigned shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 :
				 *end == 'G' || *end == 'g' ? 30 : 0;
		if (shift && v <= (UINT64_MAX >> shift)) {
			v <<= shift;
			end++;
		}
	}
	if (errno || end == val || *end || *val == '-' || v < lo || v > hi) {
		snprintf(err, errlen, "--%s: '%s' is not a number in %" PRIu64 "..%" PRIu64, opt,
			 val, lo, hi);
		return -1;
	}
	*out = v;
	return 1;
}

/* "A.B.C.D" or, when @prefix is not NULL, "A.B.C.D/N"; host order. */
static int opt_ipv4(const char *opt, const char *val, uint32_t *addr, uint8_t *prefix,
		    char *err, size_t errlen)
{
	char buf[32];
	const char *slash = strchr(val, '/');
	size_t len = slash ? (size_t)(slash - val) : strlen(val);
	struct in_addr a;
	uint64_t p = 0;

	if (len >= sizeof(buf) || (slash && !prefix))
		goto bad;
	memcpy(buf, val, len);
	buf[len] = '\0';
	if (inet_pton(AF_INET, buf, &a) != 1)
		goto bad;
	if (slash && opt_u64(opt, slash + 1, 1, 32, false, &p, err, errlen) < 0)
		goto bad;
	*addr = ntohl(a.s_addr);
	if (slash)
		*prefix = (uint8_t)p;
	return 1;
bad:
	snprintf(err, errlen, "--%s: '%s' is not an IPv4 address%s", opt, val,
		 prefix ? " (A.B.C.D or A.B.C.D/N)" : " (A.B.C.D)");
	return -1;
}

/* Which of @words (NULL-terminated) @val is; -1 with a message listing them. */
static int opt_word(const char *opt, const char *val, const char *const *words, char *err,
		    size_t errlen)
{
	char list[96] = "";

	for (int i = 0; words[i]; i++) {
		if (!strcmp(val, words[i]))
			return i;
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
			 words[i]);
	}
	snprintf(err, errlen, "--%s: '%s' is not one of %s", opt, val, list);
	return -1;
}

static int opt_bool(const char *opt, const char *val, bool *out, char *err, size_t errlen)
{
	static const char *const words[] = { "no", "yes", "0", "1", "false", "true", "off", "on",
					     NULL };
	int w = opt_word(opt, val, words, err, errlen);

	if (w < 0)
		return -1;
	*out = w & 1;
	return 1;
}

/* "1,1,2": one weight per worker, at least one of them nonzero; the config changes only
 * when the whole list is good. */
static int opt_weights(struct fp_rt_config *cfg, const char *val, char *err, size_t errlen)
{
	unsigned w[FP_RT_MAX_WORKERS];
	const char *p = val;
	unsigned n = 0, sum = 0;

	while (*p) {
		char *end;
		long v;
		errno = 0;
		v = strtol(p, &end, 10);
		if (errno || end == p || v < 0 || v > 1000 || n == FP_RT_MAX_WORKERS ||
		    (*end && *end != ','))
			goto bad;
		w[n++] = (unsigned)v;
		sum += (unsigned)v;
		p = *end ? end + 1 : end;
	}
	if (!n || !sum)
		goto bad;
	memcpy(cfg->steer_weights, w, n * sizeof(w[0]));
	cfg->n_steer_weights = n;
	return 1;
bad:
	snprintf(err, errlen, "--steer-weights: '%s' is not a list of weights 0..1000 like "
		 "1,1,2 (one per worker, at most %d, not all 0)", val, FP_RT_MAX_WORKERS);
	return -1;
}

/* "0,2,5" or "0-3" or both mixed. */
static int opt_cores(struct fp_rt_config *cfg, const char *val, char *err, size_t errlen)
{
	const char *p = val;
	unsigned n = 0;

	while (*p) {
		char *end;
		long a = strtol(p, &end, 10), b = a;
		if (end == p || a < 0)
			goto bad;
		if (*end == '-') {
			p = end + 1;
			b = strtol(p, &end, 10);
			if (end == p || b < a)
				goto bad;
		}
		for (long c = a; c <= b; c++) {
			if (n == FP_RT_MAX_WORKERS || c >= CPU_SETSIZE)
				goto bad;
			cfg->cores[n++] = (int)c;
		}
		if (*end && *end != ',')
			goto bad;
		p = *end ? end + 1 : end;
	}
	if (!n)
		goto bad;
	cfg->cores_set = true;
	cfg->n_cores = n;
	if (!cfg->workers_set)
		cfg->n_workers = n;
	return 1;
bad:
	snprintf(err, errlen, "--cores: '%s' is not a list of cores like 0,2 or 0-3 (at most %d)",
		 val, FP_RT_MAX_WORKERS);
	return -1;
}

static int opt_stats(struct fp_rt_config *cfg, const char *val, char *err, size_t errlen)
{
	size_t len = strlen(val);

	if (!strcmp(val, "none")) {
		cfg->stats_name = "";
		return 1;
	}
	if (!len || len > 64 || strspn(val, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					  "0123456789._-") != len || val[0] == '.') {
		snprintf(err, errlen, "--stats: '%s' is not a name of 1..64 letters, digits, '.', "
			 "'_' or '-' (or none)", val);
		return -1;
	}
	cfg->stats_name = val;
	return 1;
}

/* --rx-drop and --rx-reorder: a fraction in 0..1 into @out. */
static int opt_fraction(double *out, const char *opt, const char *val, char *err,
			size_t errlen)
{
	char *end;
	double p;

	errno = 0;
	p = strtod(val, &end);
	if (errno || end == val || *end || !(p >= 0.0 && p <= 1.0)) {
		snprintf(err, errlen, "--%s: '%s' is not a fraction in 0..1", opt, val);
		return -1;
	}
	*out = p;
	return 1;
}

/* The options that are plain numbers: where each goes and its range. */
static int opt_number(struct fp_rt_config *cfg, const char *opt, const char *val, char *err,
		      size_t errlen)
{
	uint64_t v;
	int r;

#define NUM(name, lo, hi, scaled, stmt)                                              \
	if (!strcmp(opt, name)) {                                                     \
		if ((r = opt_u64(opt, val, lo, hi, scaled, &v, err, errlen)) > 0) { stmt; } \
		return r;                                                             \
	}
	NUM("workers", 1, FP_RT_MAX_WORKERS, false,
	    (cfg->n_workers = (unsigned)v, cfg->workers_set = true))
	NUM("queue-base", 0, 4095, false, cfg->queue_base = (unsigned)v)
	NUM("batch", 1, FP_RT_MAX_BATCH, false, cfg->batch = (unsigned)v)
	NUM("spin-us", 0, 10000000, false, cfg->spin_us = (uint32_t)v)
	NUM("nap-us", 0, 1000000, false, cfg->nap_us = (uint32_t)v)
	NUM("ipi-after-us", 0, 1000000, false, cfg->ipi_after_us = (uint32_t)v)
	NUM("flush-us", 0, 1000000, false, cfg->flush_us = (uint32_t)v)
	NUM("burst", 1, FP_RT_MAX_WORKERS - 1, false, cfg->n_burst = (unsigned)v)
	NUM("burst-idle-us", 0, 1000000, false, cfg->burst_idle_us = (uint32_t)v)
	NUM("park-prio", 1, 99, false, cfg->park_prio = (unsigned)v)
	NUM("umem-frames", 64, 1u << 20, true, cfg->xdp.frames = cfg->dpdk.frames = (uint32_t)v)
	NUM("seed", 0, UINT64_MAX, false, cfg->seed = v)
	NUM("rcv-buf", 4096, 1u << 30, true, cfg->stack.rcv_buf = (uint32_t)v)
	NUM("max-conns", 1, 1u << 24, true, cfg->stack.max_conns = (uint32_t)v)
	NUM("rto-min-us", FP_TIMER_TICK_US, 60000000, false, cfg->stack.rto_min_us = (uint32_t)v)
	NUM("peer-delack-us", 0, 10000000, false,
	    cfg->stack.peer_delack_us = v ? (uint32_t)v : FP_NET_PEER_DELACK_NONE)
#undef NUM
	return 0;
}

/* The options that are words or addresses. */
static int opt_other(struct fp_rt_config *cfg, const char *opt, const char *val, char *err,
		     size_t errlen)
{
	static const char *const nets[] = { "kernel", "xdp", NULL };
	static const char *const idles[] = { "sleep", "poll", "adaptive", NULL }; /* enum fp_idle */
	static const char *const scheds[] = { "part", "steal", NULL };    /* enum fp_sched */
	static const char *const kios[] = { "auto", "uring", "epoll", NULL }; /* fp_kernel_io */
	static const char *const modes[] = { "auto", "native", "skb", NULL }; /* fp_xdp_mode */
	int w;

	if (!strcmp(opt, "net")) {
		if (!strcmp(val, "dpdk")) {   /* not in nets[]: its enum value follows pair's */
			cfg->transport = FP_TRANSPORT_DPDK;
		} else if ((w = opt_word(opt, val, nets, err, errlen)) < 0) {
			snprintf(err + strlen(err), errlen - strlen(err), " (or dpdk)");
			return -1;
		} else {
			cfg->transport = (enum fp_transport)w;
		}
		cfg->transport_set = true;
		return 1;
	}
	if (!strcmp(opt, "dpdk")) {
		if (!*val) {
			snprintf(err, errlen, "--dpdk: give the EAL arguments, at least the device "
				 "(--vdev=...)");
			return -1;
		}
		cfg->dpdk.args = val;
		if (!cfg->transport_set)
			cfg->transport = FP_TRANSPORT_DPDK;
		return 1;
	}
	if (!strcmp(opt, "kernel-io")) {
		if ((w = opt_word(opt, val, kios, err, errlen)) < 0)
			return -1;
		cfg->kernel_io = (enum fp_kernel_io)w;
		return 1;
	}
	if (!strcmp(opt, "idle")) {
		if ((w = opt_word(opt, val, idles, err, errlen)) < 0)
			return -1;
		cfg->idle = (enum fp_idle)w;
		cfg->idle_set = true;
		return 1;
	}
	if (!strcmp(opt, "park-queue")) {
		static const char *const pq[] = { "lend", "keep", NULL };
		if ((w = opt_word(opt, val, pq, err, errlen)) < 0)
			return -1;
		cfg->park_queue = w == 0 ? FP_PARK_QUEUE_LEND : FP_PARK_QUEUE_KEEP;
		return 1;
	}
	if (!strcmp(opt, "kernel-steer")) {
		static const char *const ks[] = { "hash", "cpu", NULL };
		if ((w = opt_word(opt, val, ks, err, errlen)) < 0)
			return -1;
		cfg->kernel_steer_cpu = w == 1;
		return 1;
	}
	if (!strcmp(opt, "nic-steer")) {
		static const char *const ns[] = { "auto", "on", "off", NULL }; /* fp_nic_steer */
		if ((w = opt_word(opt, val, ns, err, errlen)) < 0)
			return -1;
		cfg->nic_steer = (enum fp_nic_steer)w;
		return 1;
	}
	if (!strcmp(opt, "steer")) {
		static const char *const steers[] = { "groups", "queue", NULL }; /* fp_steer */
		if ((w = opt_word(opt, val, steers, err, errlen)) < 0)
			return -1;
		cfg->steer = (enum fp_steer)w;
		return 1;
	}
	if (!strcmp(opt, "sched")) {
		if ((w = opt_word(opt, val, scheds, err, errlen)) < 0)
			return -1;
		cfg->sched = (enum fp_sched)w;
		return 1;
	}
	if (!strcmp(opt, "notify")) {
		static const char *const notifies[] = { "poll", "ipi", NULL }; /* fp_notify */
		if ((w = opt_word(opt, val, notifies, err, errlen)) < 0)
			return -1;
		cfg->notify = (enum fp_notify)w;
		return 1;
	}
	if (!strcmp(opt, "xdp-mode")) {
		if ((w = opt_word(opt, val, modes, err, errlen)) < 0)
			return -1;
		cfg->xdp.mode = (enum fp_xdp_mode)w;
		return 1;
	}
	if (!strcmp(opt, "dpdk-copy"))
		return opt_bool(opt, val, &cfg->dpdk.copy, err, errlen);
	if (!strcmp(opt, "xdp-copy"))
		return opt_bool(opt, val, &cfg->xdp.force_copy, err, errlen);
	if (!strcmp(opt, "xdp-zerocopy"))
		return opt_bool(opt, val, &cfg->xdp.force_zerocopy, err, errlen);
	if (!strcmp(opt, "ip"))
		return opt_ipv4(opt, val, &cfg->ipv4, &cfg->prefix_len, err, errlen);
	if (!strcmp(opt, "gw"))
		return opt_ipv4(opt, val, &cfg->gateway, NULL, err, errlen);
	if (!strcmp(opt, "cores"))
		return opt_cores(cfg, val, err, errlen);
	if (!strcmp(opt, "steer-weights"))
		return opt_weights(cfg, val, err, errlen);
	if (!strcmp(opt, "stats"))
		return opt_stats(cfg, val, err, errlen);
	if (!strcmp(opt, "rx-drop"))
		return opt_fraction(&cfg->rx_drop, opt, val, err, errlen);
	if (!strcmp(opt, "rx-reorder"))
		return opt_fraction(&cfg->rx_reorder, opt, val, err, errlen);
	return 0;
}

static int rt_option(struct fp_rt_config *cfg, const char *opt, const char *val, char *err,
		     size_t errlen)
{
	int r;

	if (!strcmp(opt, "if")) {
		if (!*val || strlen(val) >= 16) {
			snprintf(err, errlen, "--if: '%s' is not an interface name", val);
			return -1;
		}
		cfg->ifname = val;
		if (!cfg->transport_set)
			cfg->transport = FP_TRANSPORT_XDP;
		return 1;
	}
	if ((r = opt_number(cfg, opt, val, err, errlen)) != 0)
		return r;
	return opt_other(cfg, opt, val, err, errlen);
}

static bool rt_option_known(const char *opt)
{
	for (const char *const *n = fp_rt_option_names; *n; n++)
		if (!strcmp(*n, opt))
			return true;
	return false;
}

int fp_rt_option(struct fp_rt_config *cfg, const char *opt, const char *val, char *err,
		 size_t errlen)
{
	int r;

	if (!rt_option_known(opt))
		return 0;
	if (!val) {
		snprintf(err, errlen, "--%s needs a value", opt);
		return -1;
	}
	r = rt_option(cfg, opt, val, err, errlen);
	/* The message quotes the value as given: keep it one printable line whatever the
	 * value holds (found by fuzz_rt_options: a newline in a value made two lines). */
	if (r < 0)
		for (char *c = err; errlen && *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
	return r;
}

/* ---- a run: startup steps, threads, waiting ---- */

struct rt_start;

struct rt_thread {
	struct rt_start *s;
	unsigned worker;
	pthread_t tid;
	_Atomic pid_t ktid;               /* the kernel's id of the thread (its schedstat) */
	uint64_t wait_ns;                 /* run-queue wait at the last starvation check */
	uint64_t warned_us;               /* last starvation warning */
	uint64_t run_ns, iterations;      /* time on CPU and rounds at the last check */
	uint64_t stuck_warned_us;         /* last "one round without end" warning */
};

struct rt_start {
	struct rt_run run;
	struct fp_rt_config cfg;          /* the caller's, checked and completed */
	struct fp_xdp *xdp;
	struct fp_dpdk *dpdk;
	int sig_fd;
	sigset_t old_mask;
	unsigned n_threads;
	bool started;                     /* every worker thread was started */
	bool table_pending;               /* SET_TABLE: groups still to ask to move */
	struct fp_nic_rss *nic_rss;       /* the NIC steers the groups (put back at exit) */
	struct fp_ethtool ethtool;
	char nic_why[160];                /* ...or why it does not */
	uint16_t want[FP_RSS_GROUPS];     /* ...to these workers */
	struct rt_thread threads[FP_RT_MAX_WORKERS];
	char err[256];
};

static void rt_fail_status(struct rt_run *run, int status)
{
	int zero = 0;

	atomic_compare_exchange_strong(&run->status, &zero, status);
	atomic_store(&run->stop, true);
	rt_run_wake(run);
}

void rt_run_wake(struct rt_run *run)
{
	uint64_t one = 1;

	if (run->wake_fd >= 0 && write(run->wake_fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is already full of wake-ups; nothing to add */
	}
}

/*
 * The address flowplane's own stack answers for must be one unicast address nobody else on
 * the link uses: an XDP filter takes every frame for it, so the host's own address would
 * silently take the host's traffic (a memcached on it becomes unreachable), and broadcast,
 * multicast, loopback, "this network" or the subnet's own network/broadcast address are
 * not an address a host may have. NULL when fine, else what is wrong.
 */
static const char *rt_ip_problem(uint32_t ip, uint8_t prefix, char *owner, size_t ownerlen)
{
	uint32_t mask = prefix ? ~0u << (32 - prefix) : 0;
	struct ifaddrs *ifa, *i;

	if ((ip >> 24) == 0)
		return "is in 0.0.0.0/8 (\"this network\"), not a host address";
	if ((ip >> 24) == 127)
		return "is a loopback address";
	if ((ip >> 28) == 14)
		return "is a multicast address";
	if ((ip >> 28) == 15)
		return "is broadcast or reserved (240.0.0.0/4)";
	if (prefix <= 30 && (ip & ~mask) == ~mask)
		return "is the subnet's broadcast address";
	if (prefix <= 30 && (ip & ~mask) == 0)
		return "is the subnet's network address";
	if (getifaddrs(&ifa))
		return NULL;
	for (i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    ntohl(((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr) == ip) {
			snprintf(owner, ownerlen, "%s", i->ifa_name);
			freeifaddrs(ifa);
			return "is this host's own address";
		}
	freeifaddrs(ifa);
	return NULL;
}

/* --park-prio P: only workers that fp-ctl can park (flow groups, partitioned); and the
 * policy must be ours to set, which is tried here on the main thread, then undone. */
static int config_park_prio(struct rt_start *s)
{
	struct fp_rt_config *c = &s->cfg;
	struct sched_param fifo = { .sched_priority = (int)c->park_prio }, was;
	int policy, rc;

	if (c->transport != FP_TRANSPORT_XDP || c->n_workers < 2 || c->steer != FP_STEER_GROUPS ||
	    c->sched == FP_SCHED_STEAL)
		return snprintf(s->err, sizeof(s->err), "--park-prio is for workers that fp-ctl "
				"parks: the xdp transport, several workers, --steer groups and "
				"--sched part"), -EINVAL;
	if ((rc = pthread_getschedparam(pthread_self(), &policy, &was)) == 0 &&
	    (rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &fifo)) == 0)
		rc = pthread_setschedparam(pthread_self(), policy, &was);
	if (rc)
		return snprintf(s->err, sizeof(s->err), "--park-prio %u: SCHED_FIFO is not allowed "
				"here (%s): run as root, raise RLIMIT_RTPRIO to %u (ulimit -r), or "
				"drop --park-prio", c->park_prio, strerror(rc), c->park_prio), -EPERM;
	return 0;
}

/* --burst K: the last K workers are burstable (rt/README.md, "Burstable workers"). They
 * steal (--sched steal) and own no flow group (xdp, groups: weight 0), so an allocator
 * can take their cores at any time; it finds them through the stats segment. */
static int config_burst(struct rt_start *s)
{
	struct fp_rt_config *c = &s->cfg;
	unsigned homes = c->n_workers - (c->n_burst < c->n_workers ? c->n_burst : c->n_workers);

	if (c->sched != FP_SCHED_STEAL || c->transport != FP_TRANSPORT_XDP ||
	    c->steer != FP_STEER_GROUPS)
		return snprintf(s->err, sizeof(s->err), "--burst needs --sched steal on the xdp "
				"transport with flow groups: burstable workers only steal"), -EINVAL;
	if (!homes)
		return snprintf(s->err, sizeof(s->err), "--burst %u of %u workers leaves none to "
				"own the flows: use --workers above --burst", c->n_burst,
				c->n_workers), -EINVAL;
	if (c->stats_name && !*c->stats_name)
		return snprintf(s->err, sizeof(s->err), "--burst needs the stats segment (the "
				"allocator's channel): drop --stats none"), -EINVAL;
	if (c->n_steer_weights == c->n_workers) {
		for (unsigned i = homes; i < c->n_workers; i++)
			if (c->steer_weights[i])
				return snprintf(s->err, sizeof(s->err), "--steer-weights gives "
						"burstable worker %u groups: give it 0", i), -EINVAL;
		return 0;
	}
	if (c->n_steer_weights)
		return 0;   /* the count is refused below */
	for (unsigned i = 0; i < c->n_workers; i++)
		c->steer_weights[i] = i < homes;
	c->n_steer_weights = c->n_workers;
	return 0;
}

/* Step "config": what every transport needs before anything is opened. */
static int step_config(struct rt_start *s)
{
	struct fp_rt_config *c = &s->cfg;
	int rc;

	if (c->n_workers < 1 || c->n_workers > FP_RT_MAX_WORKERS)
		return snprintf(s->err, sizeof(s->err), "%u workers: use --workers 1..%d",
				c->n_workers, FP_RT_MAX_WORKERS), -EINVAL;
	if (c->n_cores && c->n_cores < c->n_workers)
		return snprintf(s->err, sizeof(s->err), "--cores lists %u cores for %u workers; "
				"list one per worker", c->n_cores, c->n_workers), -EINVAL;
	if (c->batch < 1 || c->batch > FP_RT_MAX_BATCH)
		return snprintf(s->err, sizeof(s->err), "batch %u: use --batch 1..%d", c->batch,
				FP_RT_MAX_BATCH), -EINVAL;
	if (!(c->rx_drop >= 0.0 && c->rx_drop <= 1.0))
		return snprintf(s->err, sizeof(s->err), "use --rx-drop 0..1"), -EINVAL;
	if (!(c->rx_reorder >= 0.0 && c->rx_reorder <= 1.0))
		return snprintf(s->err, sizeof(s->err), "use --rx-reorder 0..1"), -EINVAL;
	if (c->transport == FP_TRANSPORT_XDP) {
		if (!c->ifname)
			return snprintf(s->err, sizeof(s->err), "the xdp transport needs an "
					"interface: add --if IFNAME"), -EINVAL;
		if (c->xdp.force_copy && c->xdp.force_zerocopy)
			return snprintf(s->err, sizeof(s->err), "--xdp-copy and --xdp-zerocopy "
					"exclude each other: pick one"), -EINVAL;
		c->xdp.ifname = c->ifname;
		c->xdp.ipv4 = c->ipv4;
	}
	if (c->transport == FP_TRANSPORT_DPDK && !fp_dpdk_available())
		return snprintf(s->err, sizeof(s->err), "this build has no DPDK backend: install "
				"libdpdk-dev and the PMDs (scripts/bootstrap does) and rebuild"),
		       -ENOTSUP;
	if (c->transport == FP_TRANSPORT_DPDK && !c->dpdk.args)
		return snprintf(s->err, sizeof(s->err), "the dpdk transport needs a device: --dpdk "
				"'--vdev=net_memif0,role=server,socket=/run/fp.sock'"), -EINVAL;
	if (c->transport != FP_TRANSPORT_KERNEL && !c->ipv4)
		return snprintf(s->err, sizeof(s->err), "the %s transport needs our address: add "
				"--ip A.B.C.D/N", fp_rt_transport_name(c->transport)),
		       -EINVAL;
	if (c->transport == FP_TRANSPORT_XDP) {
		char owner[32] = "", on[48] = "", ip[INET_ADDRSTRLEN];
		struct in_addr a = { htonl(c->ipv4) };
		const char *why = rt_ip_problem(c->ipv4, c->prefix_len ? c->prefix_len : 24, owner,
						sizeof(owner));

		if (why) {
			inet_ntop(AF_INET, &a, ip, sizeof(ip));
			if (*owner)
				snprintf(on, sizeof(on), " (on %s)", owner);
			return snprintf(s->err, sizeof(s->err), "--ip %s %s%s: flowplane's stack "
					"needs an unused unicast address on %s's subnet", ip, why, on,
					c->ifname),
			       -EINVAL;
		}
	}
	if (c->n_burst && (rc = config_burst(s)))
		return rc;
	if (c->park_prio && (rc = config_park_prio(s)))
		return rc;
	if (c->park_queue && (c->transport != FP_TRANSPORT_XDP || c->n_workers < 2 ||
			      c->steer != FP_STEER_GROUPS || c->sched == FP_SCHED_STEAL))
		return snprintf(s->err, sizeof(s->err), "--park-queue is for workers that fp-ctl "
				"parks: the xdp transport, several workers, --steer groups and "
				"--sched part"), -EINVAL;
	if (c->nic_steer == FP_NIC_STEER_ON && (c->transport != FP_TRANSPORT_XDP ||
						 c->n_workers < 2 || c->steer != FP_STEER_GROUPS))
		return snprintf(s->err, sizeof(s->err), "--nic-steer on programs the NIC for flow "
				"groups: the xdp transport, --steer groups and several workers"),
		       -EINVAL;
	if (c->n_steer_weights && (c->transport != FP_TRANSPORT_XDP || c->n_workers < 2 ||
				   c->steer != FP_STEER_GROUPS))
		return snprintf(s->err, sizeof(s->err), "--steer-weights needs flow groups: the "
				"xdp transport, --steer groups and several workers"), -EINVAL;
	if (c->n_steer_weights && c->n_steer_weights != c->n_workers)
		return snprintf(s->err, sizeof(s->err), "--steer-weights lists %u weights for %u "
				"workers; give one per worker", c->n_steer_weights, c->n_workers),
		       -EINVAL;
	for (unsigned i = 0; c->transport == FP_TRANSPORT_PAIR && i < c->n_workers; i++)
		if (!c->pair[i])
			return snprintf(s->err, sizeof(s->err), "the pair transport needs "
					"cfg->pair[%u] (fp_pair_create) for worker %u", i, i), -EINVAL;
	return 0;
}

/* "0-1,4" from a CPU set, for messages. */
static void cpuset_str(const cpu_set_t *set, char *out, size_t len)
{
	size_t pos = 0;

	out[0] = '\0';
	for (int c = 0; c < CPU_SETSIZE && pos < len; c++) {
		if (!CPU_ISSET(c, set) || (c > 0 && CPU_ISSET(c - 1, set)))
			continue;
		int e = c;
		while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
			e++;
		pos += (size_t)snprintf(out + pos, len - pos, e > c ? "%s%d-%d" : "%s%d",
					pos ? "," : "", c, e);
	}
}

/* Step "sched": --sched steal sets up the shuffle layer (rt/steal.c). Its workers poll:
 * one asleep could neither steal nor have its flows stolen until it woke. Under --burst,
 * where the burstable workers steal and the homes need not, a home keeps an --idle
 * policy given explicitly: idle, with none of its work running elsewhere (a steal's
 * results must find it awake), it sleeps and gives its core back, as Shenango parks
 * every core of an idle runtime; its queue's frames and hand-overs wake it. */
static int step_sched(struct rt_start *s)
{
	int rc;

	if (s->cfg.flush_us == FP_RT_FLUSH_AUTO)   /* where a send is a ring write: chunks */
		s->cfg.flush_us = s->cfg.sched == FP_SCHED_PART &&
				  s->cfg.transport == FP_TRANSPORT_DPDK ? FP_RT_DEFAULT_FLUSH_US : 0;
	s->run.flush_us = s->cfg.flush_us;
	if (s->cfg.sched != FP_SCHED_STEAL) {
		if (s->cfg.notify == FP_NOTIFY_IPI)
			return snprintf(s->err, sizeof(s->err), "--notify ipi: interrupts wake a "
					"home for thieves: it needs --sched steal"), -EINVAL;
		return 0;
	}
	if (s->cfg.flush_us)
		return snprintf(s->err, sizeof(s->err), "--flush-us is the partitioned round's: "
				"--sched steal sends mid-round on its own (after 10 us of "
				"handlers); leave --flush-us out"), -EINVAL;
	if (!s->run.app->steal_safe && !s->run.app->steal)
		return snprintf(s->err, sizeof(s->err), "--sched steal: %s's handler cannot run "
				"on another worker's flows (it is not steal-safe); use --sched part",
				s->run.app->name ? s->run.app->name : "this application"), -EINVAL;
	if (!(s->cfg.n_burst && s->cfg.idle_set))
		s->cfg.idle = FP_IDLE_POLL;
	if (!s->run.app->steal_safe) {   /* it balances its own work (fp_app.steal) */
		if (!s->run.app->work_pending || !s->run.app->ready)
			return snprintf(s->err, sizeof(s->err), "--sched steal: %s has a steal "
					"hook without work_pending and ready (api.h: all three)",
					s->run.app->name ? s->run.app->name : "this application"),
			       -EINVAL;
		if (s->cfg.notify == FP_NOTIFY_IPI)
			return snprintf(s->err, sizeof(s->err), "--notify ipi: %s runs user-level "
					"threads, which are not interrupted; use --notify poll",
					s->run.app->name ? s->run.app->name : "this application"),
			       -EINVAL;
		s->run.app_steal = true;
		return 0;
	}
	if (s->cfg.notify == FP_NOTIFY_IPI && s->cfg.transport == FP_TRANSPORT_KERNEL)
		return snprintf(s->err, sizeof(s->err), "--notify ipi: the kernel transport has no "
				"interrupt handler (its stack is Linux's); use --net xdp, pair or "
				"dpdk, or --notify poll"), -EINVAL;
	if (getenv("FP_RT_STEAL_FORCE") && s->cfg.n_workers > 1)   /* tests: every batch
								    * runs on a thief */
		s->cfg.steal_force = true;
	rc = rt_steal_setup(&s->run);
	if (rc)
		return snprintf(s->err, sizeof(s->err), "--sched steal: %s", strerror(-rc)), rc;
	if (s->cfg.notify == FP_NOTIFY_IPI &&
	    (rc = rt_ipi_setup(&s->run, s->err, sizeof(s->err)))) {
		rt_steal_teardown(&s->run);
		return rc;
	}
	return 0;
}

/* At the end of a stealing run, one line: what ran where. */
static void step_sched_down(struct rt_start *s)
{
	uint64_t stolen = 0, local = 0, remote = 0;

	if (!s->run.sh)
		return;
	for (unsigned i = 0; i < s->cfg.n_workers; i++) {
		uint64_t a, b, c;

		rt_steal_counts(&s->run, i, &a, &b, &c);
		stolen += a;
		local += b;
		remote += c;
	}
	if (!s->cfg.quiet)
		fprintf(stderr, "flowplane: sched steal: %llu batches ran on their home worker, "
			"%llu on a thief (%llu calls sent home)\n", (unsigned long long)local,
			(unsigned long long)stolen, (unsigned long long)remote);
	rt_ipi_teardown(&s->run);
	rt_steal_teardown(&s->run);
}

/* Step "cores": every core a worker is pinned to must exist and be ours to use. */
static int step_cores(struct rt_start *s)
{
	cpu_set_t allowed;
	char list[128];

	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
		return snprintf(s->err, sizeof(s->err), "sched_getaffinity: %s", strerror(errno)),
		       -errno;
	for (unsigned i = 0; i < s->cfg.n_workers; i++) {
		int c = s->cfg.cores[i];
		if (c < 0 || (c < CPU_SETSIZE && CPU_ISSET(c, &allowed)))
			continue;
		cpuset_str(&allowed, list, sizeof(list));
		return snprintf(s->err, sizeof(s->err), "worker %u: core %d does not exist or is "
				"not ours (usable: %s); fix --cores or --workers", i, c, list),
		       -EINVAL;
	}
	return 0;
}

/* Step "clock": the cycle counters in the stats are converted with the TSC rate. */
static int step_clock(struct rt_start *s)
{
	(void)s;
	if (!fp_tsc.tsc0)
		fp_tsc_calibrate(10000);  /* -ENODEV (not invariant) still gives a usable rate */
	return 0;
}

static int step_stats(struct rt_start *s)
{
	return rt_stats_create(&s->run, s->cfg.stats_name, s->err, sizeof(s->err));
}

static void step_stats_down(struct rt_start *s)
{
	rt_stats_destroy(&s->run, s->cfg.stats_name);
}

static int step_wake(struct rt_start *s)
{
	s->run.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->run.wake_fd < 0)
		return snprintf(s->err, sizeof(s->err), "eventfd: %s", strerror(errno)), -errno;
	return 0;
}

static void step_wake_down(struct rt_start *s)
{
	close(s->run.wake_fd);
	s->run.wake_fd = -1;
}

static_assert(FP_RT_STATS_MAX_WORKERS == FP_RT_MAX_WORKERS,
	      "the segment's per-worker arrays are sized for every worker");

static void step_alloc_down(struct rt_start *s)
{
	for (unsigned i = 0; i < FP_RT_MAX_WORKERS; i++)
		if (s->run.burst_efd[i] >= 0) {
			close(s->run.burst_efd[i]);
			s->run.burst_efd[i] = -1;
		}
	s->run.alloc_q = NULL;
}

/* Step "alloc" (--burst): an eventfd per burstable worker, by which the allocator wakes
 * it; their numbers go in the segment for the allocator to copy (pidfd_getfd). */
static int step_alloc(struct rt_start *s)
{
	struct fp_rt_stats_hdr *h = s->run.stats_hdr;
	unsigned first = s->cfg.n_workers - s->cfg.n_burst;

	for (unsigned i = 0; i < FP_RT_MAX_WORKERS; i++)
		s->run.burst_efd[i] = -1;
	if (!s->cfg.n_burst)
		return 0;
	for (unsigned i = first; i < s->cfg.n_workers; i++) {
		s->run.burst_efd[i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (s->run.burst_efd[i] < 0) {
			int err = -errno;

			snprintf(s->err, sizeof(s->err), "eventfd: %s", strerror(-err));
			step_alloc_down(s);   /* a failing step undoes itself */
			return err;
		}
	}
	s->run.burst_first = first;
	if (h) {
		for (unsigned i = 0; i < FP_RT_STATS_MAX_WORKERS; i++)
			h->alloc.efd[i] = i < FP_RT_MAX_WORKERS ? s->run.burst_efd[i] : -1;
		h->alloc.first_burst = first;
		__atomic_store_n(&h->alloc.n_burst, s->cfg.n_burst, __ATOMIC_RELEASE);
		s->run.alloc_q = h->alloc_q;
	}
	return 0;
}

/* Step "signals": workers inherit a mask without SIGINT/SIGTERM; the main thread reads
 * them from a signalfd, so no handler ever runs on a worker in the middle of a round
 * (--notify ipi's own signal excepted: rt/ipi.c says where it may cut in). */
static int step_signals(struct rt_start *s)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, &s->old_mask);
	s->sig_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->sig_fd < 0) {
		int err = -errno;
		pthread_sigmask(SIG_SETMASK, &s->old_mask, NULL);
		return snprintf(s->err, sizeof(s->err), "signalfd: %s", strerror(-err)), err;
	}
	return 0;
}

/* A second SIGINT or SIGTERM that came after the first was read (timeout(1) sends the child
 * one, then its process group another) is still pending: taken here, or restoring the
 * mask would deliver it and kill the process before the later steps' teardown (the
 * stats segment stayed in /dev/shm). The stop is under way already. */
static void step_signals_down(struct rt_start *s)
{
	struct signalfd_siginfo si;

	while (read(s->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		;
	close(s->sig_fd);
	pthread_sigmask(SIG_SETMASK, &s->old_mask, NULL);
}

/* Before the program is attached: the interface has a queue for every worker, and few
 * enough beyond them to poll them too, spread over the workers (with flow groups a frame
 * finds its worker from any queue, and one worker has no other; otherwise their frames
 * would go to the kernel, which does not own the address). */
static int xdp_check_queues(void *arg, unsigned nq, char *err, size_t errlen)
{
	const struct fp_rt_config *c = arg;
	unsigned n = c->n_workers, spare = nq > n ? nq - n : 0;

	if (c->queue_base + n > nq)
		return snprintf(err, errlen, "%s has %u queues; --queue-base %u with %u workers "
				"needs %u (ethtool -L %s combined N)", c->ifname, nq, c->queue_base,
				n, c->queue_base + n, c->ifname), -ERANGE;
	if (spare && n > 1 && c->steer != FP_STEER_GROUPS)
		return snprintf(err, errlen, "%s has %u queues and --steer queue has %u workers: "
				"frames on the other %u would reach no worker; use --workers %u, "
				"--steer groups, or ethtool -L %s combined %u", c->ifname, nq, n,
				spare, nq, c->ifname, n), -EINVAL;
	if (nq > RT_IF_QUEUES_MAX || (spare + n - 1) / n + 1 > RT_QUEUES_MAX)
		return snprintf(err, errlen, "%s has %u queues: %u workers can poll at most %u "
				"(ethtool -L %s combined N, or more workers)", c->ifname, nq, n,
				n * RT_QUEUES_MAX < RT_IF_QUEUES_MAX ? n * RT_QUEUES_MAX
								     : RT_IF_QUEUES_MAX,
				c->ifname), -EINVAL;
	return 0;
}

/* Step "nic" (--nic-steer): before the program is attached, the NIC's RSS as the groups'
 * first table says: group g's frames to the queue of worker table[g]. Set once: after a
 * group moves, its frames still reach the old owner's queue, which hands them over
 * (steer.c keeps a flow's frames in order that way; switching the NIC too would split a
 * flow's frames over two queues mid-move). Its down puts the NIC back. */
static int step_nic(struct rt_start *s)
{
	uint16_t table[FP_RSS_GROUPS], q[FP_RSS_GROUPS];

	if (s->cfg.transport != FP_TRANSPORT_XDP || s->cfg.n_workers < 2 ||
	    s->cfg.steer != FP_STEER_GROUPS)
		return 0;
	if (s->cfg.nic_steer == FP_NIC_STEER_OFF)
		return snprintf(s->nic_why, sizeof(s->nic_why), "--nic-steer off"), 0;
	/* no such interface: the xdp step's line says so, and how to list them */
	if (!if_nametoindex(s->cfg.ifname))
		return 0;
	rt_steer_first_table(&s->cfg, table);
	for (unsigned g = 0; g < FP_RSS_GROUPS; g++)
		q[g] = (uint16_t)(s->cfg.queue_base + table[g]);
	s->ethtool = (struct fp_ethtool){ fp_ethtool_ioctl, (void *)s->cfg.ifname };
	s->nic_rss = fp_nic_rss_program(&s->ethtool, fp_rss_key_symmetric, q, s->nic_why,
					sizeof(s->nic_why));
	if (s->nic_rss || s->cfg.nic_steer != FP_NIC_STEER_ON)
		return 0;
	int rc = errno ? -errno : -EOPNOTSUPP;
	snprintf(s->err, sizeof(s->err), "--nic-steer on: %s cannot steer the flow groups: %s "
		 "(--nic-steer auto hands frames over in software)", s->cfg.ifname, s->nic_why);
	return rc;
}

static void step_nic_down(struct rt_start *s)
{
	fp_nic_rss_restore(s->nic_rss);
	s->nic_rss = NULL;
}

/* Step "xdp": attach the program once; each worker opens its own queue on its thread. */
static int step_xdp(struct rt_start *s)
{
	if (s->cfg.transport != FP_TRANSPORT_XDP)
		return 0;
	s->cfg.xdp.check_queues = xdp_check_queues;
	s->cfg.xdp.check_arg = &s->cfg;
	s->xdp = fp_xdp_open(&s->cfg.xdp, s->err, sizeof(s->err));
	return s->xdp ? 0 : errno ? -errno : -EIO;
}

/* Step "dpdk": the EAL and the port, once; each worker opens its queue pair. */
static int step_dpdk(struct rt_start *s)
{
	if (s->cfg.transport != FP_TRANSPORT_DPDK)
		return 0;
	s->cfg.dpdk.n_queues = s->cfg.n_workers;
	s->dpdk = fp_dpdk_open(&s->cfg.dpdk, s->err, sizeof(s->err));
	if (s->dpdk)
		s->run.dev_table = fp_dpdk_steer_table(s->dpdk);
	return s->dpdk ? 0 : errno ? -errno : -EIO;
}

static void step_dpdk_down(struct rt_start *s)
{
	fp_dpdk_close(s->dpdk);
	s->dpdk = NULL;
}

static void step_xdp_down(struct rt_start *s)
{
	if (s->xdp)
		fp_xdp_close(s->xdp);
	s->xdp = NULL;
}

static void *rt_thread_main(void *arg)
{
	struct rt_thread *t = arg;
	struct rt_run *run = &t->s->run;
	int ret;

	atomic_store(&t->ktid, (pid_t)syscall(SYS_gettid));
	switch (t->s->cfg.transport) {
	case FP_TRANSPORT_XDP:
		ret = rt_worker_xdp(run, t->worker, t->s->xdp);
		break;
	case FP_TRANSPORT_PAIR:
		ret = rt_worker_pair(run, t->worker, t->s->cfg.pair[t->worker]);
		break;
	case FP_TRANSPORT_DPDK:
		ret = rt_worker_dpdk(run, t->worker, t->s->dpdk);
		break;
	default:
		ret = rt_worker_kernel(run, t->worker);
		break;
	}
	if (ret)
		rt_fail_status(run, ret);
	rt_run_wake(run);
	return NULL;
}

static int rt_thread_start(struct rt_start *s, unsigned i)
{
	struct rt_thread *t = &s->threads[i];
	pthread_attr_t attr;
	char name[16];
	int err;

	t->s = s;
	t->worker = i;
	pthread_attr_init(&attr);
	if (s->cfg.cores[i] >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(s->cfg.cores[i], &set);
		pthread_attr_setaffinity_np(&attr, sizeof(set), &set);
	}
	err = pthread_create(&t->tid, &attr, rt_thread_main, t);
	pthread_attr_destroy(&attr);
	if (err)
		return snprintf(s->err, sizeof(s->err), "worker %u: pthread_create: %s", i,
				strerror(err)), -err;
	snprintf(name, sizeof(name), "fp-w%u", i);
	pthread_setname_np(t->tid, name);
	return 0;
}

static void step_workers_down(struct rt_start *s)
{
	atomic_store(&s->run.stop, true);
	rt_run_wake(&s->run);
	for (unsigned i = 0; i < s->n_threads; i++)
		pthread_join(s->threads[i].tid, NULL);
	s->n_threads = 0;
}

/* Step "steer": on xdp with several workers, IX's flow groups in software (steer.c):
 * the table, the hand-over rings. Its down runs after the workers are joined: it closes
 * the queues, which must outlive every stack that may hold their buffers. */
static int step_steer(struct rt_start *s)
{
	if (s->cfg.transport != FP_TRANSPORT_XDP || s->cfg.n_workers < 2 ||
	    s->cfg.steer != FP_STEER_GROUPS)
		return 0;
	char why[200] = "";
	int rc = rt_steer_create(&s->run, why, sizeof(why));
	if (rc)
		snprintf(s->err, sizeof(s->err), "--steer groups: %s", why);
	return rc;
}

static void step_steer_down(struct rt_start *s)
{
	uint64_t t[4];   /* out, in, drop, rx */

	if (!s->run.steer)
		return;
	rt_steer_totals(s->run.steer, t);
	rt_steer_destroy(&s->run);
	if (!s->cfg.quiet && s->started)
		fprintf(stderr, "flowplane: steer: %llu of %llu frames received arrived on another "
			"worker's queue: %llu handed over, %llu dropped (ring full)\n",
			(unsigned long long)(t[0] + t[2]), (unsigned long long)t[3],
			(unsigned long long)t[0], (unsigned long long)t[2]);
}

static int step_workers(struct rt_start *s)
{
	int err;

	for (unsigned i = 0; i < s->cfg.n_workers; i++) {
		if ((err = rt_thread_start(s, i))) {
			step_workers_down(s);
			return err;
		}
		s->n_threads++;
	}
	s->started = true;
	return 0;
}

/* Startup, in order; on failure the steps already up come down in reverse. */
static const struct rt_step {
	const char *name;
	int (*up)(struct rt_start *s);     /* 0, or -errno with s->err saying what to do */
	void (*down)(struct rt_start *s);
} rt_steps[] = {
	{ "config",  step_config,  NULL },
	{ "cores",   step_cores,   NULL },
	{ "clock",   step_clock,   NULL },
	{ "stats",   step_stats,   step_stats_down },
	{ "wake",    step_wake,    step_wake_down },
	{ "alloc",   step_alloc,   step_alloc_down },
	{ "sched",   step_sched,   step_sched_down },
	{ "signals", step_signals, step_signals_down },
	{ "nic",     step_nic,     step_nic_down },
	{ "xdp",     step_xdp,     step_xdp_down },
	{ "dpdk",    step_dpdk,    step_dpdk_down },
	{ "steer",   step_steer,   step_steer_down },
	{ "workers", step_workers, step_workers_down },
};

static void rt_steps_down(struct rt_start *s, size_t n_up)
{
	while (n_up--)
		if (rt_steps[n_up].down)
			rt_steps[n_up].down(s);
}

/* "0,1" or "unpinned" for the startup line. */
static void cores_str(const struct fp_rt_config *c, char *out, size_t len)
{
	size_t pos = 0;

	out[0] = '\0';
	for (unsigned i = 0; i < c->n_workers && pos < len; i++)
		pos += (size_t)snprintf(out + pos, len - pos, c->cores[i] < 0 ? "%s-" : "%s%d",
					i ? "," : "", c->cores[i]);
}

/* Transport-specific part of the startup line. */
static void summary_net(struct rt_start *s, char *out, size_t len)
{
	const struct fp_rt_config *c = &s->cfg;
	static const char *const modes[] = { "auto", "native", "skb" };
	char ip[INET_ADDRSTRLEN];
	struct in_addr a = { htonl(c->ipv4) };
	unsigned n = c->n_workers;

	inet_ntop(AF_INET, &a, ip, sizeof(ip));
	if (c->transport == FP_TRANSPORT_KERNEL) {
		/* What the workers chose (auto falls back to epoll where io_uring is refused). */
		unsigned u = atomic_load(&s->run.n_uring);
		snprintf(out, len, "kernel sockets (%s%s) on %s%s",
			 u == n ? "io_uring" : u == 0 ? "epoll" : "io_uring on some workers, epoll",
			 c->kernel_io == FP_KERNEL_IO_AUTO ? ", auto" : "",
			 c->ipv4 ? ip : "any address",
			 n < 2 ? "" : c->kernel_steer_cpu ? ", connections to the worker on the CPU "
			 "that received them" : ", connections spread by the reuseport hash");
	}
	else if (c->transport == FP_TRANSPORT_PAIR)
		snprintf(out, len, "pair from %s/%u", ip, c->prefix_len);
	else if (c->transport == FP_TRANSPORT_DPDK) {
		char rss[200] = "";
		if (fp_dpdk_steer_table(s->dpdk))
			snprintf(rss, sizeof(rss), "; 128 flow groups steered by the port's RSS "
				 "table (%u entries)", fp_dpdk_rss_entries(s->dpdk));
		else if (n > 1)
			snprintf(rss, sizeof(rss), "; a frame stays on its queue's worker (no RSS: "
				 "%s)", fp_dpdk_rss_why(s->dpdk));
		const char *why = fp_dpdk_copy_why(s->dpdk);

		snprintf(out, len, "dpdk (%s, %s) %s/%u, a queue pair per worker%s",
			 fp_dpdk_driver(s->dpdk), why ? why : "zero-copy", ip, c->prefix_len, rss);
	} else {
		unsigned nq = s->xdp ? fp_xdp_queues(s->xdp) : n;
		char spare[64] = "", steer[240] = "";
		if (s->nic_rss)
			snprintf(steer, sizeof(steer), "; 128 flow groups steered by the NIC's RSS "
				 "table (%u entries%s; moved groups handed over in software)",
				 fp_nic_rss_entries(s->nic_rss),
				 fp_nic_rss_udp(s->nic_rss) ? "" : ", UDP in software");
		else if (s->run.steer)
			snprintf(steer, sizeof(steer), "; 128 flow groups steered in software, "
				 "not by the NIC: %s", s->nic_why);
		else if (n > 1)
			snprintf(steer, sizeof(steer), "; a frame stays on its queue's worker");
		if (nq > n)
			snprintf(spare, sizeof(spare), "; %u more queue%s polled by the workers",
				 nq - n, nq - n > 1 ? "s" : "");
		snprintf(out, len, "xdp on %s %s/%u (mode %s: %u/%u queues zero-copy, %u/%u "
			 "native%s%s)", c->ifname, ip, c->prefix_len, modes[c->xdp.mode],
			 atomic_load(&s->run.n_zerocopy), n, atomic_load(&s->run.n_native), n,
			 steer, spare);
	}
}

static void rt_summary(struct rt_start *s)
{
	const struct fp_rt_config *c = &s->cfg;
	char net[512], cores[200], stats[96], idle[128];

	summary_net(s, net, sizeof(net));
	cores_str(c, cores, sizeof(cores));
	if (c->stats_name && !*c->stats_name)
		snprintf(stats, sizeof(stats), "no stats");
	else if (c->stats_name)
		snprintf(stats, sizeof(stats), "stats %s", c->stats_name);
	else
		snprintf(stats, sizeof(stats), "stats %ld", (long)getpid());
	if (c->sched == FP_SCHED_STEAL && c->n_burst)
		snprintf(idle, sizeof(idle), "sched steal, homes idle %s, %u burstable (park after "
			 "%u us idle; fp-ctl alloc grants)",
			 c->idle == FP_IDLE_POLL ? "poll" : c->idle == FP_IDLE_ADAPTIVE ?
			 "adaptive" : "sleep", c->n_burst, c->burst_idle_us);
	else if (c->sched == FP_SCHED_STEAL && c->notify == FP_NOTIFY_IPI)
		snprintf(idle, sizeof(idle), "sched steal, interrupts after %u us, idle poll",
			 c->ipi_after_us);
	else if (c->sched == FP_SCHED_STEAL)
		snprintf(idle, sizeof(idle), "sched steal, idle poll");
	else if (c->transport == FP_TRANSPORT_DPDK && c->idle != FP_IDLE_POLL && !c->nap_us)
		snprintf(idle, sizeof(idle), "idle poll (--nap-us 0)");
	else if (c->transport == FP_TRANSPORT_DPDK && c->idle != FP_IDLE_POLL)
		/* no receive interrupt: wait_fd is -1, so a sleep is a nap (worker.c) */
		snprintf(idle, sizeof(idle), "idle %s %u us, naps <= %u us",
			 c->idle == FP_IDLE_ADAPTIVE ? "adaptive, spin <=" : "sleep after",
			 c->spin_us, c->nap_us);
	else if (c->idle == FP_IDLE_POLL)
		snprintf(idle, sizeof(idle), "idle poll");
	else if (c->idle == FP_IDLE_ADAPTIVE)
		snprintf(idle, sizeof(idle), "idle adaptive (spin <= %u us)", c->spin_us);
	else
		snprintf(idle, sizeof(idle), "idle sleep after %u us", c->spin_us);
	char flush[48] = "";

	if (c->sched == FP_SCHED_PART && c->flush_us && c->flush_us != FP_RT_FLUSH_AUTO)
		snprintf(flush, sizeof(flush), " (sent every %u us of handlers)", c->flush_us);
	fprintf(stderr, "flowplane: %s: %s, %u worker%s on core%s %s%s, batch %u%s, %s, %s\n",
		s->run.app->name ? s->run.app->name : "app", net, c->n_workers,
		c->n_workers == 1 ? "" : "s", c->n_workers == 1 ? "" : "s", cores,
		c->cores_set ? "" : " (the default, first cores; --cores to choose)", c->batch,
		flush, idle, stats);
}

/* Time @t's thread has spent on its CPU, and runnable but waiting for it (schedstat); 0
 * when it cannot be read. */
static uint64_t rt_thread_wait_ns(const struct rt_thread *t, uint64_t *run_out)
{
	char path[64];
	unsigned long long run_ns, wait_ns;
	pid_t tid = atomic_load(&t->ktid);
	FILE *f;
	int n;

	*run_out = 0;
	if (!tid)
		return 0;
	snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", (int)tid);
	if (!(f = fopen(path, "r")))
		return 0;
	n = fscanf(f, "%llu %llu", &run_ns, &wait_ns);
	fclose(f);
	if (n != 2)
		return 0;
	*run_out = run_ns;
	return wait_ns;
}

/*
 * A worker is pinned to its core; when another task holds that core (a real-time one, or a
 * busy neighbour), the worker answers only when it is let run, and nothing else would say
 * why. Every RT_STARVE_CHECK_US the main thread reads each worker's run-queue wait; a
 * worker that waited more than half of that time is named, with its core, at most every
 * RT_STARVE_WARN_US.
 */
#define RT_STARVE_CHECK_US 1000000u
#define RT_CMD_BUSY_US     200000u   /* after a command, answer the next within 1 ms */
#define RT_TABLE_POLL_NS   50000L    /* while a wanted table is applied */
#define RT_STARVE_WARN_US  (10u * 1000000)

/*
 * flowplane does not preempt: a handler, or a user-level thread, that runs without
 * returning (or yielding) holds its worker, and every other flow of that worker waits.
 * That is detected here, not prevented: a worker that was on its CPU for a twentieth of a
 * check's span or more (however busy the machine, a round never takes that long) without
 * finishing a single round of its loop is named, at most every RT_STARVE_WARN_US. (A
 * sleeping worker also finishes no round, but is not on its CPU.)
 */
static void rt_stuck_check(struct rt_start *s, struct rt_thread *t, unsigned i, uint64_t run_ns,
			   uint64_t now_us, uint64_t span_us)
{
	const struct fp_rt_stats_hdr *h = s->run.stats_hdr;
	uint64_t it;

	if (!h || i >= h->n_workers)
		return;
	it = __atomic_load_n(&fp_rt_stats_worker(h, i)->iterations, __ATOMIC_RELAXED);
	if (t->run_ns && it == t->iterations && it && run_ns - t->run_ns > span_us * 50 &&
	    (!t->stuck_warned_us || now_us - t->stuck_warned_us >= RT_STARVE_WARN_US)) {
		fprintf(stderr, "flowplane: worker %u has been in one round of its loop for over "
			"%.1f s: a handler or user-level thread runs without returning or yielding "
			"(flowplane does not preempt), and the worker's other flows wait\n", i,
			(double)span_us / 1e6);
		t->stuck_warned_us = now_us;
	}
	t->iterations = it;
	t->run_ns = run_ns;
}

static void rt_starve_check(struct rt_start *s, uint64_t now_us, uint64_t span_us)
{
	for (unsigned i = 0; i < s->n_threads; i++) {
		struct rt_thread *t = &s->threads[i];
		uint64_t run_ns, w = rt_thread_wait_ns(t, &run_ns), d = w - t->wait_ns;

		if (run_ns)
			rt_stuck_check(s, t, i, run_ns, now_us, span_us);
		if (!w)
			continue;
		if (t->wait_ns && d > span_us * 500 &&
		    (!t->warned_us || now_us - t->warned_us >= RT_STARVE_WARN_US)) {
			fprintf(stderr, "flowplane: worker %u on core %d waited %.0f%% of the last "
				"%.1f s for its CPU: another task is using core %d (see top -H, "
				"chrt -p); pick free cores with --cores\n", i, s->cfg.cores[i],
				100.0 * (double)d / ((double)span_us * 1000.0), (double)span_us / 1e6,
				s->cfg.cores[i]);
			t->warned_us = now_us;
		}
		t->wait_ns = w;
	}
}

/* SET_TABLE: the wanted table, checked whole (a worker of the run, not parked) and kept;
 * rt_table_work() asks the moves. */
static int rt_table_take(struct rt_start *s)
{
	const struct fp_rt_stats_hdr *h = s->run.stats_hdr;

	if (!s->run.steer || s->run.sh)
		return -EOPNOTSUPP;
	if (!s->run.app->steal_safe && !(s->run.app->flow_leave && s->run.app->flow_arrive))
		return -EPERM;
	for (unsigned g = 0; g < FP_RSS_GROUPS; g++) {
		uint16_t w = __atomic_load_n(&h->want[g], __ATOMIC_RELAXED);
		if (w >= s->cfg.n_workers)
			return -EINVAL;
		if (rt_steer_parked(s->run.steer, w))
			return -EHOSTDOWN;
		s->want[g] = w;
	}
	s->table_pending = true;
	return 0;
}

/* Ask the moves the wanted table still needs; an owner busy with one is asked again on
 * the next call. False once the table is what was wanted. */
static bool rt_table_work(struct rt_start *s)
{
	const uint16_t *t = rt_steer_table(s->run.steer);
	bool left = false;

	for (unsigned g = 0; g < FP_RSS_GROUPS; g++) {
		uint16_t e = __atomic_load_n(&t[g], __ATOMIC_ACQUIRE);

		if (e == s->want[g])
			continue;
		if (e & FP_RT_GROUP_MOVING) {
			left = true;
			continue;
		}
		int r = rt_steer_ask_move(s->run.steer, g, s->want[g]);
		if (r == 0 || r == -EBUSY)
			left = true;   /* asked, or its owner is busy: looked at again */
		else
			s->want[g] = e;   /* cannot go there now (parked since): stays */
	}
	return left;
}

/* A command from the stats segment's channel (fp-ctl): checked, passed on, answered.
 * True when there was one. */
static bool rt_command(struct rt_start *s)
{
	struct fp_rt_stats_hdr *h = s->run.stats_hdr;
	uint64_t seq;
	int r;

	if (!h || (seq = __atomic_load_n(&h->cmd.seq, __ATOMIC_ACQUIRE)) <= h->cmd.done_seq)
		return false;
	uint32_t op = h->cmd.op, a0 = h->cmd.arg0, a1 = h->cmd.arg1;
	switch (op) {
	case FP_RT_CMD_MOVE_GROUP:
		if (!s->run.steer || s->run.sh)
			r = -EOPNOTSUPP;   /* no flow groups here, or --sched steal */
		else if (!s->run.app->steal_safe &&
			 !(s->run.app->flow_leave && s->run.app->flow_arrive))
			r = -EPERM;        /* the application's flows cannot change worker */
		else
			r = rt_steer_ask_move(s->run.steer, a0, a1);
		break;
	case FP_RT_CMD_SET_TABLE:
		r = rt_table_take(s);
		break;
	case FP_RT_CMD_PARK:
	case FP_RT_CMD_UNPARK:
		if (!s->run.steer || s->run.sh)
			r = -EOPNOTSUPP;   /* a worker's flows cannot be moved away */
		else
			r = rt_steer_park(s->run.steer, a0, op == FP_RT_CMD_PARK);
		break;
	default:
		r = -EINVAL;
		break;
	}
	h->cmd.result = r;
	if (r)
		h->cmd.rejected++;
	else
		h->cmd.accepted++;
	__atomic_store_n(&h->cmd.done_seq, seq, __ATOMIC_RELEASE);
	return true;
}

/* The main thread's part: wait for a signal or for the run to stop by itself. */
static void rt_wait(struct rt_start *s)
{
	bool told = s->cfg.quiet;
	uint64_t last_check = rt_now_us(), last_cmd = 0;

	while (!atomic_load(&s->run.stop)) {
		struct pollfd p[2] = { { .fd = s->sig_fd, .events = POLLIN },
				       { .fd = s->run.wake_fd, .events = POLLIN } };
		struct signalfd_siginfo si;

		/* Once every worker has run init: the line says what they chose (AF_XDP modes,
		 * the kernel transport's engine). */
		if (!told && atomic_load(&s->run.n_ready) == s->cfg.n_workers) {
			rt_summary(s);
			told = true;
		}
		/* With flow groups it also answers commands, within about 10 ms, and within
		 * 1 ms while a controller is talking (a rebalance is many moves). */
		uint64_t now0 = rt_now_us();
		int wait_ms = !told ? 5 : !s->run.steer ? 100
			      : now0 - last_cmd < RT_CMD_BUSY_US ? 1 : 10;
		/* a table to apply: every 50 us, so a rebalance of many groups takes
		 * milliseconds, not one poll period per group */
		struct timespec ts = { 0, s->table_pending ? RT_TABLE_POLL_NS : wait_ms * 1000000L };
		if (s->table_pending)
			s->table_pending = rt_table_work(s);
		if (ppoll(p, 2, &ts, NULL) > 0 && (p[0].revents & POLLIN) &&
		    read(s->sig_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
			atomic_store(&s->run.stop, true);
			rt_run_wake(&s->run);
		}
		uint64_t now = rt_now_us();
		if (rt_command(s))
			last_cmd = now;
		if (now - last_check >= RT_STARVE_CHECK_US) {
			rt_starve_check(s, now, now - last_check);
			last_check = now;
		}
	}
}

int fp_rt_run(const struct fp_rt_config *cfg, const struct fp_app *app)
{
	struct rt_start *s = calloc(1, sizeof(*s));
	size_t up;
	int ret = 0;

	if (!s) {
		fprintf(stderr, "flowplane: startup: out of memory\n");
		return -ENOMEM;
	}
	s->cfg = *cfg;
	s->run.cfg = &s->cfg;
	s->run.app = app;
	s->run.wake_fd = -1;
	s->sig_fd = -1;
	atomic_init(&s->run.stop, false);
	atomic_init(&s->run.status, 0);
	for (up = 0; up < FP_ARRAY_SIZE(rt_steps); up++) {
		if ((ret = rt_steps[up].up(s)) != 0) {
			fprintf(stderr, "flowplane: %s: %s\n", rt_steps[up].name,
				s->err[0] ? s->err : strerror(-ret));
			break;
		}
	}
	if (!ret)
		rt_wait(s);
	rt_steps_down(s, up);
	if (!ret)
		ret = atomic_load(&s->run.status);
	free(s);
	return ret;
}

/* xdp_prog.c: AF_XDP's interface side: privileges, interface facts, the filter program's life. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <linux/capability.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/sockios.h>
#include <net/if_arp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/libxdp.h>

#include <flowplane/log.h>

#include "af_xdp.h"
#include "xdp_filter_obj.h" /* fp_xdp_filter_obj[]: xdp_filter.bpf.c, compiled at build time */

/*
 * One program per interface (xdp_filter.bpf.c) sends frames for our address, and ARP for
 * it, to the AF_XDP socket of the queue they arrived on (its XSKMAP, filled by af_xdp.c as
 * queues open); the host keeps everything else. The program carries the pid that attached
 * it, so a later run can tell a filter left by a crash (remove it) from a live one (refuse).
 */
#define XDP_PROG_NAME          "fp_xdp_filter"
#define XDP_DEFAULT_FRAMES     4096
#define XDP_DEFAULT_FRAME_SIZE 2048
#define XDP_DEFAULT_RING       2048
#define XDP_MIN_FRAMES         64

/* Keep in step with struct xdp_cfg in xdp_filter.bpf.c. */
struct xdp_cfg {
	uint32_t ipv4;       /* network byte order */
	uint32_t owner_pid;
};

/* Loading BPF and attaching XDP need CAP_BPF (or CAP_SYS_ADMIN on its own) and
 * CAP_NET_ADMIN; an AF_XDP socket needs CAP_NET_RAW. Checked up front so the user gets one
 * clear line instead of EPERM from somewhere inside libbpf. */
static bool has_caps(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	memset(d, 0, sizeof(d));
	if (syscall(SYS_capget, &h, d))
		return geteuid() == 0;
#define HAS(c) (d[(c) >> 5].effective & (1u << ((c) & 31)))
	return HAS(CAP_NET_ADMIN) && HAS(CAP_NET_RAW) && (HAS(CAP_BPF) || HAS(CAP_SYS_ADMIN));
#undef HAS
}

static int config_check(struct fp_xdp_config *c, char *err, size_t errlen)
{
	if (!c->frames)
		c->frames = XDP_DEFAULT_FRAMES;
	if (!c->frame_size)
		c->frame_size = XDP_DEFAULT_FRAME_SIZE;
	if (!c->ring_size)
		c->ring_size = XDP_DEFAULT_RING;
	if (c->frame_size != 2048 && c->frame_size != 4096) {
		xdp_errf(err, errlen, "AF_XDP frame size %u: use 2048 or 4096", c->frame_size);
		return -EINVAL;
	}
	if (c->frames < XDP_MIN_FRAMES || !fp_is_pow2(c->ring_size)) {
		xdp_errf(err, errlen, "AF_XDP needs at least %u frames and a power-of-2 ring size "
		         "(got %u frames, ring %u)", XDP_MIN_FRAMES, c->frames, c->ring_size);
		return -EINVAL;
	}
	if (c->force_zerocopy && (c->force_copy || c->mode == FP_XDP_SKB)) {
		xdp_errf(err, errlen, "AF_XDP zero-copy needs native mode and not copy mode");
		return -EINVAL;
	}
	if (!c->ipv4) {
		xdp_errf(err, errlen, "AF_XDP needs the address to steer (ipv4 is 0)");
		return -EINVAL;
	}
	return 0;
}

/* rx-* entries in sysfs: the fallback for drivers without ETHTOOL_GCHANNELS. Only right in
 * the network namespace sysfs was mounted in, hence a fallback. */
static unsigned sysfs_rx_queues(const char *ifname)
{
	char path[64 + IF_NAMESIZE];
	unsigned n = 0;
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/sys/class/net/%s/queues", ifname);
	if (!(d = opendir(path)))
		return 0;
	while ((e = readdir(d)))
		n += strncmp(e->d_name, "rx-", 3) == 0;
	closedir(d);
	return n;
}

/* MAC, MTU and receive queue count. Channels: combined plus rx-only ones (veth reports
 * its real_num_rx_queues as rx_count). */
static int if_info(struct fp_xdp *x, char *err, size_t errlen)
{
	struct ethtool_channels ch = { .cmd = ETHTOOL_GCHANNELS };
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, x->ifname, sizeof(x->ifname));
	if (ioctl(fd, SIOCGIFHWADDR, &ifr) || ifr.ifr_hwaddr.sa_family != ARPHRD_ETHER) {
		xdp_errf(err, errlen, "%s is not an Ethernet interface", x->ifname);
		close(fd);
		return -EINVAL;
	}
	memcpy(x->mac.b, ifr.ifr_hwaddr.sa_data, FP_ETH_ALEN);
	x->mtu = ioctl(fd, SIOCGIFMTU, &ifr) ? 1500 :
		 (uint16_t)(ifr.ifr_mtu > UINT16_MAX ? UINT16_MAX : ifr.ifr_mtu);
	ifr.ifr_data = (void *)&ch;
	if (ioctl(fd, SIOCETHTOOL, &ifr) == 0)
		x->n_queues = ch.combined_count + ch.rx_count;
	if (!x->n_queues)
		x->n_queues = sysfs_rx_queues(x->ifname);
	if (!x->n_queues)
		x->n_queues = 1;
	close(fd);
	return 0;
}

/* libbpf and libxdp speak through our log, at debug level: the caller gets our one line,
 * and --log debug shows the verifier's story behind it. */
static int lib_log(const char *lib, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	if (n && line[n - 1] == '\n')
		line[n - 1] = '\0';
	log_debug("af_xdp: %s: %s", lib, line);
	return 0;
}

static int libbpf_log(enum libbpf_print_level l, const char *fmt, va_list ap)
{
	(void)l;
	return lib_log("libbpf", fmt, ap);
}

static int libxdp_log(enum libxdp_print_level l, const char *fmt, va_list ap)
{
	(void)l;
	return lib_log("libxdp", fmt, ap);
}

static int prog_load(struct fp_xdp *x, char *err, size_t errlen)
{
	struct xdp_cfg cfg = { .ipv4 = htonl(x->cfg.ipv4), .owner_pid = (uint32_t)getpid() };
	uint32_t zero = 0;
	struct bpf_map *xsks;
	int ret = -ENOENT;

	x->obj = bpf_object__open_mem(fp_xdp_filter_obj, fp_xdp_filter_obj_len, NULL);
	if (!x->obj) {
		ret = -errno;
		goto fail;
	}
	/* one socket slot per receive queue: redirect indexes it by rx_queue_index */
	xsks = bpf_object__find_map_by_name(x->obj, "fp_xsks");
	if (!xsks || (ret = bpf_map__set_max_entries(xsks, x->n_queues)))
		goto fail;
	if ((ret = bpf_object__load(x->obj)))
		goto fail;
	x->prog_fd = bpf_program__fd(bpf_object__find_program_by_name(x->obj, XDP_PROG_NAME));
	x->xsks_fd = bpf_map__fd(xsks);
	x->arps_fd = bpf_object__find_map_fd_by_name(x->obj, "fp_arps");
	ret = bpf_map_update_elem(bpf_object__find_map_fd_by_name(x->obj, "fp_cfg"), &zero,
				  &cfg, BPF_ANY);
	if (x->prog_fd >= 0 && x->xsks_fd >= 0 && !ret)
		return 0;
	ret = ret ? ret : -ENOENT;
fail:
	ret = ret < 0 ? ret : -EINVAL;
	xdp_errf(err, errlen, "loading the XDP filter failed (%s): kernel without BPF/XDP, or "
	         "see --log debug", strerror(-ret));
	return ret;
}

/* The pid in the fp_cfg map of an attached flowplane program; 0 when unreadable. */
static uint32_t prog_owner(const uint32_t *map_ids, uint32_t n)
{
	struct xdp_cfg cfg = { 0 };
	uint32_t zero = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct bpf_map_info mi;
		uint32_t len = sizeof(mi);
		int fd = bpf_map_get_fd_by_id(map_ids[i]);
		if (fd < 0)
			continue;
		memset(&mi, 0, sizeof(mi));
		if (!bpf_obj_get_info_by_fd(fd, &mi, &len) && !strcmp(mi.name, "fp_cfg"))
			bpf_map_lookup_elem(fd, &zero, &cfg);
		close(fd);
	}
	return cfg.owner_pid;
}

/*
 * A program already on the interface: flowplane's, left by a run that died (its sockets
 * closed with it, so every frame is being passed to the host): remove it. One whose owner
 * is alive, or anyone else's program: refuse, rather than cut off a running service.
 */
static int evict_stale(struct fp_xdp *x, char *err, size_t errlen)
{
	LIBBPF_OPTS(bpf_xdp_query_opts, qo);
	struct bpf_prog_info pi;
	uint32_t map_ids[8], len = sizeof(pi), id, mode, pid = 0;
	int fd, ret = -EBUSY;

	if (bpf_xdp_query(x->ifindex, 0, &qo))
		return 0;
	id = qo.drv_prog_id ? qo.drv_prog_id : qo.skb_prog_id ? qo.skb_prog_id : qo.hw_prog_id;
	mode = qo.drv_prog_id ? XDP_FLAGS_DRV_MODE :
	       qo.skb_prog_id ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_HW_MODE;
	if (!id)
		return 0;
	memset(&pi, 0, sizeof(pi));
	pi.nr_map_ids = FP_ARRAY_SIZE(map_ids);
	pi.map_ids = (uintptr_t)map_ids;
	if ((fd = bpf_prog_get_fd_by_id(id)) < 0 || bpf_obj_get_info_by_fd(fd, &pi, &len)) {
		snprintf(pi.name, sizeof(pi.name), "id %u", id);
	} else if (!strcmp(pi.name, XDP_PROG_NAME)) {
		pid = prog_owner(map_ids, pi.nr_map_ids < 8 ? pi.nr_map_ids : 8);
		if (pid && (kill((pid_t)pid, 0) == 0 || errno != ESRCH)) {
			xdp_errf(err, errlen, "flowplane (pid %u) already holds %s: stop it first",
			         pid, x->ifname);
			goto out;
		}
		LIBBPF_OPTS(bpf_xdp_attach_opts, ao, .old_prog_fd = fd);
		if (!(ret = bpf_xdp_detach(x->ifindex, mode, &ao)))
			log_warn("af_xdp: %s: removed the filter left by pid %u (exited)",
				 x->ifname, pid);
		else
			xdp_errf(err, errlen, "removing the filter a dead run left on %s: %s",
			         x->ifname, strerror(-ret));
		goto out;
	}
	xdp_errf(err, errlen, "%s already has an XDP program (%s): remove it with "
	         "'ip link set dev %s %s off' or use --net kernel", x->ifname, pi.name, x->ifname,
	         mode == XDP_FLAGS_SKB_MODE ? "xdpgeneric" :
	         mode == XDP_FLAGS_DRV_MODE ? "xdpdrv" : "xdpoffload");
out:
	if (fd >= 0)
		close(fd);
	return ret;
}

static int prog_attach(struct fp_xdp *x, char *err, size_t errlen)
{
	int ret = evict_stale(x, err, errlen);

	if (ret)
		return ret;
	ret = bpf_xdp_attach(x->ifindex, x->prog_fd,
			     x->attach_flags | XDP_FLAGS_UPDATE_IF_NOEXIST, NULL);
	if (!ret)
		return 0;
	if (x->attach_flags & XDP_FLAGS_DRV_MODE)
		xdp_errf(err, errlen, "XDP native attach to %s refused (%s: driver has no XDP "
		         "support?): try --xdp-mode skb", x->ifname, strerror(-ret));
	else
		xdp_errf(err, errlen, "XDP skb-mode attach to %s failed: %s", x->ifname,
		         strerror(-ret));
	return ret;
}

static void xdp_free(struct fp_xdp *x)
{
	bpf_object__close(x->obj);
	free(x);
}

struct fp_xdp *fp_xdp_open(const struct fp_xdp_config *cfg, char *err, size_t errlen)
{
	struct rlimit unlimited = { RLIM_INFINITY, RLIM_INFINITY };
	struct fp_xdp *x;
	int ret;

	if (!has_caps()) {
		xdp_errf(err, errlen, "AF_XDP needs root or CAP_NET_ADMIN, CAP_NET_RAW and "
		         "CAP_BPF; run as root or use --net kernel");
		errno = EPERM;
		return NULL;
	}
	if (!(x = calloc(1, sizeof(*x)))) {
		xdp_errf(err, errlen, "out of memory");
		return NULL;
	}
	x->cfg = *cfg;
	x->prog_fd = x->xsks_fd = x->arps_fd = -1;
	if ((ret = config_check(&x->cfg, err, errlen)))
		goto fail;
	if (!cfg->ifname || strlen(cfg->ifname) >= IF_NAMESIZE ||
	    !(x->ifindex = (int)if_nametoindex(cfg->ifname))) {
		xdp_errf(err, errlen, "no interface '%s' (ip link shows the names)",
		         cfg->ifname ? cfg->ifname : "");
		ret = -ENODEV;
		goto fail;
	}
	strcpy(x->ifname, cfg->ifname);
	x->attach_flags = x->cfg.mode == FP_XDP_SKB ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
	if ((ret = if_info(x, err, errlen)))
		goto fail;
	if (cfg->check_queues && (ret = cfg->check_queues(cfg->check_arg, x->n_queues, err, errlen)))
		goto fail;
	/* UMEM pages are charged to RLIMIT_MEMLOCK unless we hold CAP_IPC_LOCK; best effort */
	setrlimit(RLIMIT_MEMLOCK, &unlimited);
	libbpf_set_print(libbpf_log);
	libxdp_set_print(libxdp_log);
	if ((ret = prog_load(x, err, errlen)) || (ret = prog_attach(x, err, errlen)))
		goto fail;
	log_info("af_xdp: %s: filter attached (%s mode), %u queues, mtu %u", x->ifname,
		 x->cfg.mode == FP_XDP_SKB ? "skb" : "native", x->n_queues, x->mtu);
	return x;
fail:
	xdp_free(x);
	errno = -ret;
	return NULL;
}

unsigned fp_xdp_queues(const struct fp_xdp *x) { return x->n_queues; }

void fp_xdp_close(struct fp_xdp *x)
{
	if (!x)
		return;
	if (x->open_queues)
		log_warn("af_xdp: %s closed with %u queues still open", x->ifname, x->open_queues);
	/* old_prog_fd: detach only if the program there is still ours */
	LIBBPF_OPTS(bpf_xdp_attach_opts, ao, .old_prog_fd = x->prog_fd);
	if (bpf_xdp_detach(x->ifindex, x->attach_flags, &ao))
		log_warn("af_xdp: %s: detaching the filter failed", x->ifname);
	xdp_free(x);
}

/* stats.c: the per-run statistics segment in /dev/shm (rt_stats.h): create, publish, open to read. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <flowplane/clock.h>
#include <flowplane/log.h>
#include <flowplane/net.h>
#include <flowplane/rt_stats.h>

#include "defs.h"

#define RT_STATS_FILE   "flowplane-"            /* its name in /dev/shm */
#define RT_STATS_PREFIX "/" RT_STATS_FILE
#define RT_STATS_NAME_MAX 64

/* The shm name for a run: NULL means our pid; "" means no segment (returns false). */
static bool rt_stats_path(const char *name, char *out, size_t outlen)
{
	if (name && !*name)
		return false;
	if (name)
		snprintf(out, outlen, RT_STATS_PREFIX "%s", name);
	else
		snprintf(out, outlen, RT_STATS_PREFIX "%ld", (long)getpid());
	return true;
}

/* What identifies a segment's writer (magic .. start time): the header's fixed prefix, the
 * same in every layout, so segments of older (smaller) layouts are recognised too. */
#define RT_STATS_ID_BYTES offsetof(struct fp_rt_stats_hdr, net_names)

static bool pid_alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/*
 * A segment of that name already exists. If the run that made it is gone (crashed, or
 * killed before it could unlink), replace it; if it is alive, refuse: two runs must not
 * write one segment. Returns 0 when the name is free again.
 */
static int rt_stats_reclaim(const char *path, char *err, size_t errlen)
{
	int fd = shm_open(path, O_RDONLY, 0);
	struct fp_rt_stats_hdr h;
	ssize_t n = -1;

	if (fd >= 0) {
		n = pread(fd, &h, sizeof(h), 0);
		close(fd);
	}
	if (n >= (ssize_t)RT_STATS_ID_BYTES && h.magic == FP_RT_STATS_MAGIC && h.pid != getpid() &&
	    pid_alive(h.pid)) {
		snprintf(err, errlen, "/dev/shm%s is in use by pid %d; pick another --stats NAME",
			 path, (int)h.pid);
		return -EEXIST;
	}
	if (shm_unlink(path) < 0 && errno != ENOENT) {
		snprintf(err, errlen, "cannot remove the stale /dev/shm%s: %s", path,
			 strerror(errno));
		return -errno;
	}
	return 0;
}

/*
 * Segments of runs that are gone: a run killed with SIGKILL (or a crash) cannot unlink its
 * /dev/shm/flowplane-<pid>, and the next run has another pid, so nothing would ever remove
 * it. At start, every flowplane-* whose writer's pid is dead and whose workers have not
 * published for RT_STATS_STALE_S is removed, and said so (as the stale XDP filter is).
 */
#define RT_STATS_STALE_S 10

static bool rt_stats_abandoned(const char *name)
{
	char path[RT_STATS_NAME_MAX + 16];
	struct fp_rt_stats_hdr h;
	uint64_t t;
	int fd;
	bool gone = false;

	snprintf(path, sizeof(path), "/%s", name);
	if ((fd = shm_open(path, O_RDONLY | O_CLOEXEC, 0)) < 0)
		return false;
	if (pread(fd, &h, sizeof(h), 0) >= (ssize_t)RT_STATS_ID_BYTES &&
	    h.magic == FP_RT_STATS_MAGIC && h.pid != getpid() && !pid_alive(h.pid)) {
		uint64_t last = h.start_unix_ns;
		for (uint32_t i = 0; i < h.n_workers && i < FP_RT_MAX_WORKERS; i++)
			if (pread(fd, &t, sizeof(t), h.hdr_size + (off_t)i * h.worker_size +
				  (off_t)offsetof(struct fp_rt_worker_stats, now_unix_ns)) ==
			    (ssize_t)sizeof(t) && t > last)
				last = t;
		gone = rt_unix_ns() > last + RT_STATS_STALE_S * 1000000000ull;
	}
	close(fd);
	return gone;
}

static void rt_stats_sweep(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		char path[sizeof(e->d_name) + 1];

		if (strncmp(e->d_name, RT_STATS_FILE, sizeof(RT_STATS_FILE) - 1) ||
		    strlen(e->d_name) > RT_STATS_NAME_MAX + sizeof(RT_STATS_PREFIX) ||
		    !rt_stats_abandoned(e->d_name))
			continue;
		snprintf(path, sizeof(path), "/%s", e->d_name);
		if (shm_unlink(path) == 0)
			log_warn("stats: removed /dev/shm/%s, left by a run that is gone",
				 e->d_name);
	}
	closedir(d);
}

/* Open a fresh segment of @size bytes, replacing a stale one; fd or -errno. */
static int rt_stats_shm(const char *path, size_t size, char *err, size_t errlen)
{
	int fd = -1, ret;

	for (int tries = 0; tries < 2 && fd < 0; tries++) {
		fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0 && errno == EEXIST && (ret = rt_stats_reclaim(path, err, errlen)))
			return ret;
	}
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot create /dev/shm%s: %s", path, strerror(errno));
		return ret;
	}
	if (ftruncate(fd, (off_t)size) < 0) {
		ret = -errno;
		snprintf(err, errlen, "cannot size /dev/shm%s: %s (is /dev/shm full?)", path,
			 strerror(errno));
		close(fd);
		shm_unlink(path);
		return ret;
	}
	return fd;
}

static void copy_str(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src ? src : "");
}

/* Everything but the magic, which goes last so a reader never trusts a half-filled one. */
static void rt_stats_fill(struct rt_run *run, struct fp_rt_stats_hdr *h)
{
	const struct fp_rt_config *cfg = run->cfg;
	unsigned net_count = fp_net_stat_count < FP_RT_NET_MAX ? fp_net_stat_count : FP_RT_NET_MAX;

	h->version = FP_RT_STATS_VERSION;
	h->hdr_size = sizeof(*h);
	h->worker_size = sizeof(struct fp_rt_worker_stats);
	h->n_workers = cfg->n_workers;
	h->batch_max = cfg->batch;
	h->pid = getpid();
	h->idle_policy = cfg->idle;
	copy_str(h->transport, sizeof(h->transport), fp_rt_transport_name(cfg->transport));
	copy_str(h->ifname, sizeof(h->ifname), cfg->ifname);
	copy_str(h->app, sizeof(h->app), run->app->name);
	h->start_unix_ns = rt_unix_ns();
	h->tsc_hz = fp_tsc.hz;
	/* The kernel transport has no stack of ours: no net[] counters. */
	h->net_count = cfg->transport == FP_TRANSPORT_KERNEL ? 0 : net_count;
	for (unsigned i = 0; i < h->net_count; i++)
		copy_str(h->net_names[i], sizeof(h->net_names[i]), fp_net_stat_names[i]);
	for (unsigned i = 0; i < cfg->n_workers; i++) {
		struct fp_rt_worker_stats *w = rt_stats_worker(run, i);
		w->core = cfg->cores[i];
		w->queue = cfg->transport == FP_TRANSPORT_XDP ? cfg->queue_base + i : i;
	}
}

int rt_stats_create(struct rt_run *run, const char *name, char *err, size_t errlen)
{
	char path[RT_STATS_NAME_MAX + 16];
	size_t size = sizeof(struct fp_rt_stats_hdr) +
		      (size_t)run->cfg->n_workers * sizeof(struct fp_rt_worker_stats);
	void *p;
	int fd;

	run->stats_hdr = NULL;
	run->stats_size = 0;
	if (!rt_stats_path(name, path, sizeof(path)))
		return 0;
	rt_stats_sweep();
	if ((fd = rt_stats_shm(path, size, err, errlen)) < 0)
		return fd;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		int ret = -errno;
		snprintf(err, errlen, "cannot map /dev/shm%s: %s", path, strerror(errno));
		shm_unlink(path);
		return ret;
	}
	run->stats_hdr = p;
	run->stats_size = size;
	rt_stats_fill(run, run->stats_hdr);
	__atomic_store_n(&run->stats_hdr->magic, FP_RT_STATS_MAGIC, __ATOMIC_RELEASE);
	return 0;
}

struct fp_rt_worker_stats *rt_stats_worker(struct rt_run *run, unsigned worker)
{
	struct fp_rt_stats_hdr *h = run->stats_hdr;

	if (!h || worker >= h->n_workers)
		return NULL;
	/* Records start at a cache-line multiple (hdr_size, worker_size: see the create). */
	void *p = (char *)h + h->hdr_size + (size_t)worker * h->worker_size;

	return p;
}

void rt_stats_destroy(struct rt_run *run, const char *name)
{
	char path[RT_STATS_NAME_MAX + 16];

	if (!run->stats_hdr)
		return;
	munmap(run->stats_hdr, run->stats_size);
	run->stats_hdr = NULL;
	if (rt_stats_path(name, path, sizeof(path)))
		shm_unlink(path);
}

/* Readers map read-only, the controller read-write (the command channel); both check
 * that this is a layout they understand. */
static struct fp_rt_stats_hdr *stats_open(const char *name, size_t *size_out, bool rw)
{
	char path[RT_STATS_NAME_MAX + 16];
	struct fp_rt_stats_hdr *h;
	struct stat sb;
	int fd;

	if (!name || !*name || strchr(name, '/') || strlen(name) > RT_STATS_NAME_MAX) {
		errno = EINVAL;
		return NULL;
	}
	rt_stats_path(name, path, sizeof(path));
	if ((fd = shm_open(path, (rw ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0)) < 0)
		return NULL;
	if (fstat(fd, &sb) < 0 || (size_t)sb.st_size < sizeof(*h)) {
		close(fd);
		errno = EPROTO;
		return NULL;
	}
	h = mmap(NULL, (size_t)sb.st_size, rw ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
		 fd, 0);
	close(fd);
	if (h == MAP_FAILED)
		return NULL;
	if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != FP_RT_STATS_MAGIC ||
	    h->version != FP_RT_STATS_VERSION || h->hdr_size < sizeof(*h) ||
	    h->worker_size < sizeof(struct fp_rt_worker_stats) ||
	    h->net_count > FP_RT_NET_MAX ||
	    h->hdr_size + (size_t)h->n_workers * h->worker_size > (size_t)sb.st_size) {
		munmap((void *)h, (size_t)sb.st_size);
		errno = EPROTO;
		return NULL;
	}
	if (size_out)
		*size_out = (size_t)sb.st_size;
	return h;
}

const struct fp_rt_stats_hdr *fp_rt_stats_open(const char *name, size_t *size_out)
{
	return stats_open(name, size_out, false);
}

struct fp_rt_stats_hdr *fp_rt_stats_open_rw(const char *name, size_t *size_out)
{
	return stats_open(name, size_out, true);
}

/* ---- IX's control-plane metrics ---- */

static uint64_t ewma(uint64_t old, uint64_t now, unsigned shift, bool first)
{
	if (first)
		return now;
	/* x += (now - x) / 2^shift, in signed arithmetic; a step the division rounds to 0 is
	 * one unit, so the average reaches a steady value (a delay of 1 ns never decaying to
	 * 0 kept a "queueing delay > 0" bound firing on an idle run) */
	int64_t d = (int64_t)now - (int64_t)old, step = d / (int64_t)(1u << shift);

	if (!step && d)
		step = d > 0 ? 1 : -1;
	return (uint64_t)((int64_t)old + step);
}

void rt_ctl_interval(struct rt_ctl_acc *a, struct fp_rt_worker_stats *s, uint64_t now_us,
		     unsigned batch_max)
{
	static const unsigned shifts[3] = { 1, 3, 5 };   /* alpha 1/2, 1/8, 1/32 */
	uint64_t busy = s->busy_cycles - a->busy0, idle = s->idle_cycles - a->idle0;
	bool first = s->ctl_intervals == 0;

	if (a->end_us) {
		uint64_t tau = a->rounds ? fp_cycles_to_ns(a->cycles / a->rounds) : 0;
		uint64_t q = a->rounds ? a->q_sum * 1000 / a->rounds : 0;
		uint64_t b = batch_max ? batch_max : 1;
		/* ceil(Q / B) rounds of tau each: the wait of the last frame in the queue */
		uint64_t delay = (q + b * 1000 - 1) / (b * 1000) * tau;
		/* no time accounted at all: the worker slept through it (its sleep is added
		 * when it wakes) */
		uint64_t idle_ppm = busy + idle ? idle * 1000000 / (busy + idle) : 1000000;

		s->ctl_tau_ns = tau;
		s->ctl_q_milli = q;
		s->ctl_delay_ns = delay;
		s->ctl_idle_ppm = idle_ppm;
		for (unsigned i = 0; i < 3; i++) {
			s->ctl_tau_ewma_ns[i] = ewma(s->ctl_tau_ewma_ns[i], tau, shifts[i], first);
			s->ctl_q_ewma_milli[i] = ewma(s->ctl_q_ewma_milli[i], q, shifts[i], first);
			s->ctl_delay_ewma_ns[i] = ewma(s->ctl_delay_ewma_ns[i], delay, shifts[i], first);
			s->ctl_idle_ewma_ppm[i] = ewma(s->ctl_idle_ewma_ppm[i], idle_ppm, shifts[i],
						       first);
		}
		s->ctl_intervals++;
	}
	a->end_us = now_us + FP_RT_CTL_INTERVAL_US;
	a->rounds = a->cycles = a->q_sum = 0;
	a->busy0 = s->busy_cycles;
	a->idle0 = s->idle_cycles;
}

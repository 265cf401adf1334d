/* fuzz_rt_options.c: the runtime's option parser (fp_rt_option) on arbitrary names and values. */
#include <arpa/inet.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/rt.h>

/*
 * The input is a list of NUL-separated fields:
 *
 *   E  name  \0  value  \0  name  \0  value  \0 ...
 *
 * E (one byte) picks the error buffer's size, 2..257 bytes. A name of one byte below 0x20
 * is fp_rt_option_names[byte % (count + 1)] (the last index: an unknown name), so every
 * option is one byte away; any other name is taken as it is. A value of exactly "\x01"
 * is NULL (a getopt entry without an argument). Every pair goes to fp_rt_option() on one
 * config from fp_rt_config_init(), in order, as an application's argv would; the fields
 * stay in place for the whole input, since the config keeps pointers into --if and
 * --stats values (argv outlives the config, so must they).
 *
 * After each call it checks what rt.h promises:
 *   - the return is -1, 0 or 1; 0 exactly when the name is not in fp_rt_option_names;
 *   - on 0 nothing changes (config, error buffer);
 *   - on -1 the message is one non-empty line starting with "--", NUL-terminated inside
 *     the buffer, nothing written past it, and the config unchanged;
 *   - on 1 only the fields of that option changed, and the whole config is still one
 *     that fp_rt_run's config step accepts field by field: batch in 1..FP_RT_MAX_BATCH,
 *     n_workers in 1..FP_RT_MAX_WORKERS, rx_drop and rx_reorder in [0, 1], cores listed in range, the
 *     prefix 1..32, enums in range, --if and --stats names valid and pointing at argv.
 *
 * One thing the parser does that rt.h leaves open is tolerated, and named here so a
 * reader knows it was seen: a bad --cores list may have overwritten some cores[] entries
 * before it failed (n_cores and cores_set do not change, so nothing reads them). A bad
 * --steer-weights list changes nothing (this target found one that left a valid count
 * over weights all 0). Error
 * messages quote the value with control characters replaced, so they are always one
 * line (this target first found a value with a newline making two).
 */

#define CHECK(x) do { if (!(x)) abort(); } while (0)
#define ERR_CAP 258
#define CANARY  0xa5

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static unsigned n_names(void)
{
	unsigned n = 0;

	while (fp_rt_option_names[n])
		n++;
	return n;
}

static bool is_rt_name(const char *opt)
{
	for (unsigned i = 0; fp_rt_option_names[i]; i++)
		if (!strcmp(opt, fp_rt_option_names[i]))
			return true;
	return false;
}

/* Copy into @to the fields option @opt may change in @from; false for an unknown option. */
static bool take_fields(struct fp_rt_config *to, const struct fp_rt_config *from, const char *opt)
{
#define F(field) (to->field = from->field)
	if (!strcmp(opt, "net"))
		F(transport), F(transport_set);
	else if (!strcmp(opt, "kernel-io"))
		F(kernel_io);
	else if (!strcmp(opt, "if"))
		F(ifname), F(transport);
	else if (!strcmp(opt, "dpdk"))
		F(dpdk.args), F(transport);
	else if (!strcmp(opt, "ip"))
		F(ipv4), F(prefix_len);
	else if (!strcmp(opt, "gw"))
		F(gateway);
	else if (!strcmp(opt, "workers"))
		F(n_workers), F(workers_set);
	else if (!strcmp(opt, "cores"))
		memcpy(to->cores, from->cores, sizeof(to->cores)), F(cores_set), F(n_cores),
		F(n_workers);
	else if (!strcmp(opt, "queue-base"))
		F(queue_base);
	else if (!strcmp(opt, "kernel-steer"))
		F(kernel_steer_cpu);
	else if (!strcmp(opt, "steer"))
		F(steer);
	else if (!strcmp(opt, "steer-weights"))
		memcpy(to->steer_weights, from->steer_weights, sizeof(to->steer_weights)),
		F(n_steer_weights);
	else if (!strcmp(opt, "sched"))
		F(sched);
	else if (!strcmp(opt, "notify"))
		F(notify);
	else if (!strcmp(opt, "ipi-after-us"))
		F(ipi_after_us);
	else if (!strcmp(opt, "flush-us"))
		F(flush_us);
	else if (!strcmp(opt, "batch"))
		F(batch);
	else if (!strcmp(opt, "idle"))
		F(idle), F(idle_set);
	else if (!strcmp(opt, "spin-us"))
		F(spin_us);
	else if (!strcmp(opt, "nap-us"))
		F(nap_us);
	else if (!strcmp(opt, "burst"))
		F(n_burst);
	else if (!strcmp(opt, "burst-idle-us"))
		F(burst_idle_us);
	else if (!strcmp(opt, "park-prio"))
		F(park_prio);
	else if (!strcmp(opt, "park-queue"))
		F(park_queue);
	else if (!strcmp(opt, "nic-steer"))
		F(nic_steer);
	else if (!strcmp(opt, "xdp-mode"))
		F(xdp.mode);
	else if (!strcmp(opt, "xdp-copy"))
		F(xdp.force_copy);
	else if (!strcmp(opt, "xdp-zerocopy"))
		F(xdp.force_zerocopy);
	else if (!strcmp(opt, "umem-frames"))
		F(xdp.frames), F(dpdk.frames);
	else if (!strcmp(opt, "dpdk-copy"))
		F(dpdk.copy);
	else if (!strcmp(opt, "rx-drop"))
		F(rx_drop);
	else if (!strcmp(opt, "rx-reorder"))
		F(rx_reorder);
	else if (!strcmp(opt, "seed"))
		F(seed);
	else if (!strcmp(opt, "rcv-buf"))
		F(stack.rcv_buf);
	else if (!strcmp(opt, "max-conns"))
		F(stack.max_conns);
	else if (!strcmp(opt, "rto-min-us"))
		F(stack.rto_min_us);
	else if (!strcmp(opt, "peer-delack-us"))
		F(stack.peer_delack_us);
	else if (!strcmp(opt, "stats"))
		F(stats_name);
	else
		return false;
#undef F
	return true;
}

/* A name --stats takes: 1..64 of [A-Za-z0-9._-], not starting with '.'. */
static bool stats_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > 64 || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-'))
			return false;
	}
	return true;
}

/* Whether @p points into the input's fields [lo, hi). */
static bool points_into(const char *p, const char *lo, const char *hi)
{
	return (uintptr_t)p >= (uintptr_t)lo && (uintptr_t)p < (uintptr_t)hi;
}

/* The config as fp_rt_run's config step would see it, field by field. */
static void check_config(const struct fp_rt_config *c, const char *lo, const char *hi)
{
	CHECK(c->transport == FP_TRANSPORT_KERNEL || c->transport == FP_TRANSPORT_XDP ||
	      c->transport == FP_TRANSPORT_DPDK);
	CHECK(c->idle == FP_IDLE_SLEEP || c->idle == FP_IDLE_POLL || c->idle == FP_IDLE_ADAPTIVE);
	CHECK(c->sched == FP_SCHED_PART || c->sched == FP_SCHED_STEAL);
	CHECK(c->notify == FP_NOTIFY_POLL || c->notify == FP_NOTIFY_IPI);
	CHECK(c->ipi_after_us <= 1000000);
	CHECK(c->flush_us <= 1000000 || c->flush_us == FP_RT_FLUSH_AUTO);
	CHECK(c->steer == FP_STEER_GROUPS || c->steer == FP_STEER_QUEUE);
	CHECK(c->n_steer_weights <= FP_RT_MAX_WORKERS);
	unsigned wsum = 0;
	for (unsigned i = 0; i < c->n_steer_weights; i++) {
		CHECK(c->steer_weights[i] <= 1000);
		wsum += c->steer_weights[i];
	}
	CHECK(!c->n_steer_weights || wsum > 0);
	CHECK(c->kernel_io == FP_KERNEL_IO_AUTO || c->kernel_io == FP_KERNEL_IO_URING ||
	      c->kernel_io == FP_KERNEL_IO_EPOLL);
	CHECK(c->xdp.mode == FP_XDP_AUTO || c->xdp.mode == FP_XDP_NATIVE ||
	      c->xdp.mode == FP_XDP_SKB);
	CHECK(c->batch >= 1 && c->batch <= FP_RT_MAX_BATCH);
	CHECK(c->n_workers >= 1 && c->n_workers <= FP_RT_MAX_WORKERS);
	CHECK(c->rx_drop >= 0.0 && c->rx_drop <= 1.0);   /* also false for NaN */
	CHECK(c->rx_reorder >= 0.0 && c->rx_reorder <= 1.0);
	CHECK(c->prefix_len >= 1 && c->prefix_len <= 32);
	CHECK(c->queue_base <= 4095);
	CHECK(c->spin_us <= 10000000);
	CHECK(c->nap_us <= 1000000);
	CHECK(c->n_burst < FP_RT_MAX_WORKERS);
	CHECK(c->burst_idle_us <= 1000000);
	CHECK(c->park_prio <= 99);
	CHECK(c->park_queue <= FP_PARK_QUEUE_KEEP);
	CHECK(c->nic_steer <= FP_NIC_STEER_OFF);
	CHECK(c->xdp.frames == 0 || (c->xdp.frames >= 64 && c->xdp.frames <= (1u << 20)));
	CHECK(c->dpdk.frames == c->xdp.frames);   /* --umem-frames sets both */
	CHECK(c->stack.rcv_buf == 0 || (c->stack.rcv_buf >= 4096 && c->stack.rcv_buf <= (1u << 30)));
	CHECK(c->stack.rto_min_us == 0 ||
	      (c->stack.rto_min_us >= FP_TIMER_TICK_US && c->stack.rto_min_us <= 60000000));
	CHECK(c->stack.peer_delack_us == 0 || c->stack.peer_delack_us == FP_NET_PEER_DELACK_NONE ||
	      (c->stack.peer_delack_us >= 1 && c->stack.peer_delack_us <= 10000000));
	CHECK(c->stack.max_conns == 0 ||
	      (c->stack.max_conns >= 1 && c->stack.max_conns <= (1u << 24)));
	CHECK(c->n_cores <= FP_RT_MAX_WORKERS);
	CHECK(c->cores_set == (c->n_cores > 0));
	for (unsigned i = 0; i < c->n_cores; i++)
		CHECK(c->cores[i] >= 0 && c->cores[i] < CPU_SETSIZE);
	if (c->cores_set && !c->workers_set)
		CHECK(c->n_workers == c->n_cores);
	if (!c->transport_set)   /* --if and --dpdk imply theirs; the last one given wins */
		CHECK(c->transport == FP_TRANSPORT_KERNEL ? !c->ifname && !c->dpdk.args :
		      c->transport == FP_TRANSPORT_XDP ? c->ifname != NULL :
		      c->transport == FP_TRANSPORT_DPDK && c->dpdk.args != NULL);
	if (c->dpdk.args)
		CHECK(points_into(c->dpdk.args, lo, hi));
	if (c->ifname) {
		CHECK(points_into(c->ifname, lo, hi));
		CHECK(strlen(c->ifname) >= 1 && strlen(c->ifname) < 16);
	}
	if (c->stats_name && *c->stats_name) {
		CHECK(points_into(c->stats_name, lo, hi));
		CHECK(stats_name_ok(c->stats_name));
	}
}

/* What a taken value must have set, re-derived from the value where that is simple. */
static void check_taken(const struct fp_rt_config *c, const char *opt, const char *val)
{
	if (!strcmp(opt, "if")) {
		CHECK(c->ifname == val);
	} else if (!strcmp(opt, "stats")) {
		CHECK(!strcmp(val, "none") ? !strcmp(c->stats_name, "") : c->stats_name == val);
	} else if (!strcmp(opt, "dpdk")) {
		CHECK(c->dpdk.args == val);
	} else if (!strcmp(opt, "net")) {
		CHECK(c->transport_set);
		CHECK(c->transport == (!strcmp(val, "xdp") ? FP_TRANSPORT_XDP :
				       !strcmp(val, "dpdk") ? FP_TRANSPORT_DPDK : FP_TRANSPORT_KERNEL));
	} else if (!strcmp(opt, "ip") || !strcmp(opt, "gw")) {
		char buf[32];
		const char *slash = strchr(val, '/');
		size_t len = slash ? (size_t)(slash - val) : strlen(val);
		struct in_addr a;

		CHECK(len < sizeof(buf));
		CHECK(!slash || opt[0] == 'i');
		memcpy(buf, val, len);
		buf[len] = '\0';
		CHECK(inet_pton(AF_INET, buf, &a) == 1);
		CHECK((opt[0] == 'i' ? c->ipv4 : c->gateway) == ntohl(a.s_addr));
		if (slash)
			CHECK(c->prefix_len == (uint8_t)strtoul(slash + 1, NULL, 0));
	} else if (!strcmp(opt, "batch")) {
		CHECK(c->batch == strtoull(val, NULL, 0));
	} else if (!strcmp(opt, "workers")) {
		CHECK(c->workers_set && c->n_workers == strtoull(val, NULL, 0));
	} else if (!strcmp(opt, "rx-reorder")) {
		CHECK(c->rx_reorder == strtod(val, NULL));
	} else if (!strcmp(opt, "rx-drop")) {
		CHECK(c->rx_drop == strtod(val, NULL));
	}
}

/* The message of a -1: one non-empty line, starting with "--", inside the buffer. */
static void check_error(const char *err, size_t errlen, const char *opt, const char *val)
{
	size_t len = strnlen(err, errlen);

	CHECK(len < errlen);                 /* NUL-terminated inside the buffer */
	CHECK(len > 0);
	CHECK(errlen < 3 || !strncmp(err, "--", 2));
	for (size_t i = errlen; i < ERR_CAP; i++)
		CHECK((uint8_t)err[i] == CANARY);
	(void)opt;
	(void)val;
	for (const char *c = err; *c; c++)   /* one printable line, whatever the value held */
		CHECK((unsigned char)*c >= 0x20 && *c != 0x7f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const unsigned count = n_names();
	struct fp_rt_config cfg, before;
	char err[ERR_CAP];
	char *buf, *p, *end;
	size_t errlen;

	if (size < 1)
		return 0;
	errlen = 2 + data[0];
	/* Our own NUL-terminated copy: the last field ends at the input's end. */
	buf = malloc(size);
	CHECK(buf);
	memcpy(buf, data + 1, size - 1);
	buf[size - 1] = '\0';
	end = buf + size;

	fp_rt_config_init(&cfg);
	check_config(&cfg, buf, end);
	for (p = buf; p < end;) {
		const char *opt = p, *val;
		int r;

		p += strlen(p) + 1;
		if (opt[0] != '\0' && (uint8_t)opt[0] < 0x20 && opt[1] == '\0')
			opt = (uint8_t)opt[0] % (count + 1) < count ?
			      fp_rt_option_names[(uint8_t)opt[0] % (count + 1)] : "no-such-option";
		val = p < end ? p : "";
		if (p < end)
			p += strlen(p) + 1;
		if (!strcmp(val, "\x01"))
			val = NULL;

		memset(err, CANARY, sizeof(err));
		memcpy(&before, &cfg, sizeof(cfg));
		r = fp_rt_option(&cfg, opt, val, err, errlen);
		CHECK(r == -1 || r == 0 || r == 1);
		if (r == 0) {
			CHECK(!is_rt_name(opt));     /* not ours, with a value or without */
			CHECK(!memcmp(&cfg, &before, sizeof(cfg)));
			for (size_t i = 0; i < sizeof(err); i++)
				CHECK((uint8_t)err[i] == CANARY);
			continue;
		}
		CHECK(is_rt_name(opt));
		if (r < 0) {
			check_error(err, errlen, opt, val);
			/* Unchanged, but for cores[] entries a bad --cores list overwrote. */
			memcpy(before.cores, cfg.cores, sizeof(cfg.cores));
			CHECK(!memcmp(&cfg, &before, sizeof(cfg)));
			continue;
		}
		/* Taken: only its own fields moved. */
		CHECK(val);
		check_taken(&cfg, opt, val);
		if (!take_fields(&before, &cfg, opt)) {
			fprintf(stderr, "fuzz_rt_options: --%s is new to this harness: add the "
				"fields it sets to take_fields()\n", opt);
			abort();
		}
		CHECK(!memcmp(&cfg, &before, sizeof(cfg)));
		check_config(&cfg, buf, end);
	}
	free(buf);
	return 0;
}

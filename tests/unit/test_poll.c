/* test_poll.c: the per-round poll hook (fp_app.poll, evl's ops->poll) on the kernel transport. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#include <flowplane/evl.h>
#include <flowplane/rt.h>

/*
 * The hook runs once per round whatever happens (no condition, no timer), and the calls
 * it queues execute right after it: a LISTEN queued from poll comes back to the handler
 * as a return, and a datagram sent from evl's poll reaches a socket. Unprivileged: the
 * kernel transport on loopback, one unpinned worker polling.
 */

#define POLLS_WANTED 2000u
#define LOOP 0x7f000001u   /* 127.0.0.1: the runtime takes addresses in host order */

static void kernel_config(struct fp_rt_config *cfg)
{
	fp_rt_config_init(cfg);
	cfg->transport = FP_TRANSPORT_KERNEL;
	cfg->transport_set = true;
	cfg->ipv4 = LOOP;
	cfg->n_workers = 1;
	cfg->cores[0] = -1;
	cfg->cores_set = true;
	cfg->idle = FP_IDLE_POLL;
	cfg->quiet = true;
	cfg->stats_name = "";
}

/* A test whose hook never runs must fail, not hang: every run also stops at a deadline,
 * and then the hook's count is short. */
#define DEADLINE_US 5000000u

static struct fp_timer deadline;
static struct fp_ctx *deadline_ctx;

static void deadline_fn(struct fp_timer *t, uint64_t now_us)
{
	(void)t;
	(void)now_us;
	fp_ctx_stop(deadline_ctx, 0);
}

static void arm_deadline(struct fp_ctx *ctx)
{
	deadline_ctx = ctx;
	fp_timer_init(&deadline, deadline_fn);
	fp_ctx_timer_add(ctx, &deadline, fp_ctx_now_us(ctx) + DEADLINE_US);
}

/* ---- the native API ---- */

struct native {
	unsigned polls, listens_queued, listen_rets, handles;
	int64_t listen_ret;
};

static void native_poll(struct fp_ctx *ctx)
{
	struct native *n = fp_ctx_user(ctx);

	if (++n->polls == 1) {
		fp_listen(ctx, 0, 7);   /* port 0: the kernel picks one */
		n->listens_queued++;
	}
	if (n->polls >= POLLS_WANTED && n->listen_rets)
		fp_ctx_stop(ctx, 0);
}

static void native_handle(struct fp_ctx *ctx, const struct fp_cond *conds, unsigned nc,
			  const struct fp_call *rets, unsigned nr)
{
	struct native *n = fp_ctx_user(ctx);

	(void)conds;
	(void)nc;
	n->handles++;
	for (unsigned i = 0; i < nr; i++) {
		if (rets[i].type == FP_CALL_LISTEN && rets[i].cookie == 7) {
			n->listen_rets++;
			n->listen_ret = rets[i].ret;
		}
	}
}

static int native_init(struct fp_ctx *ctx, void *arg)
{
	fp_ctx_set_user(ctx, arg);
	arm_deadline(ctx);
	return 0;
}

static void test_native_poll_runs_and_its_calls_execute(void **state)
{
	struct native n = { 0 };
	struct fp_app app = { .name = "test_poll", .init = native_init, .handle = native_handle,
			      .poll = native_poll, .arg = &n };
	struct fp_rt_config cfg;

	(void)state;
	kernel_config(&cfg);
	assert_int_equal(fp_rt_run(&cfg, &app), 0);
	assert_true(n.polls >= POLLS_WANTED);     /* every round, with nothing else to do */
	assert_int_equal(n.listens_queued, 1);
	assert_int_equal(n.listen_rets, 1);       /* executed once, handed up once */
	assert_int_equal(n.listen_ret, 0);
}

/* ---- evl ---- */

struct evl_state {
	uint16_t port;              /* the test's UDP socket */
	unsigned polls, sent;
	int send_rc;
};

static int ev_init(struct fp_evl *evl, void *arg)
{
	fp_evl_set_user(evl, arg);
	fp_evl_udp_bind(evl, 0);
	arm_deadline(fp_evl_ctx(evl));
	return 0;
}

static void ev_poll(struct fp_evl *evl)
{
	struct evl_state *s = fp_evl_user(evl);
	static const char msg[] = "from poll";

	s->polls++;
	if (s->polls == 100) {
		s->send_rc = fp_evl_udp_send(evl, 0, LOOP, s->port, msg,
					     sizeof(msg));
		s->sent++;
	}
	if (s->polls >= POLLS_WANTED)
		fp_ctx_stop(fp_evl_ctx(evl), 0);
}

static const struct fp_evl_ops ev_ops = { .init = ev_init, .poll = ev_poll };

static void test_evl_poll_writes_leave(void **state)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	struct evl_state s = { 0 };
	struct fp_rt_config cfg;
	struct fp_app app;
	char buf[64];
	int fd;

	(void)state;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	s.port = ntohs(sa.sin_port);

	kernel_config(&cfg);
	fp_evl_app(&app, &ev_ops, &s);
	assert_non_null(app.poll);
	assert_int_equal(fp_rt_run(&cfg, &app), 0);
	assert_true(s.polls >= POLLS_WANTED);
	assert_int_equal(s.sent, 1);
	assert_int_equal(s.send_rc, 0);
	assert_int_equal(recv(fd, buf, sizeof(buf), 0), (ssize_t)sizeof("from poll"));
	assert_string_equal(buf, "from poll");
	close(fd);
}

static void test_evl_without_poll_sets_none(void **state)
{
	static const struct fp_evl_ops none = { .init = ev_init };
	struct fp_app app;

	(void)state;
	fp_evl_app(&app, &none, NULL);
	assert_null(app.poll);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_native_poll_runs_and_its_calls_execute),
		cmocka_unit_test(test_evl_poll_writes_leave),
		cmocka_unit_test(test_evl_without_poll_sets_none),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

/* tcp.c: placeholder until TCP lands: drops every segment so the rest of the stack links. */
#include "defs.h"

int tcp_init(struct fp_stack *st)
{
	st->tcp = NULL;
	return 0;
}

void tcp_destroy(struct fp_stack *st) { (void)st; }

void tcp_input(struct fp_stack *st, struct fp_mbuf *m, const struct fp_ipv4 *ip)
{
	(void)ip;
	NET_STAT_INC(st, tcp_no_port);
	net_free(st, m);
}

uint32_t fp_stack_tcp_conns(const struct fp_stack *st)
{
	(void)st;
	return 0;
}

/* kernel_uring.h: the io_uring engine's private state, shared by its receive side (kernel_uring.c) and its send side (kernel_uring_tx.c). */
#pragma once

#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include <flowplane/compiler.h>
#include <flowplane/pool.h>

#include "kernel.h"

#define KU_SQ_ENTRIES   4096u
#define KU_CQ_ENTRIES   16384u
#define KU_RING_BUFS    1024u          /* receive buffers the kernel may fill; a power of 2 */
#define KU_BGID         0
#define KU_SND_BUDGET   (256u * 1024)  /* bytes a flow may have taken and not yet sent */
#define KU_TX_BUFS      4096u          /* send chunks per worker (64 MiB, touched lazily) */
#define KU_TX_BUF_SIZE  16384u
#define KU_TX_IOV       8u             /* chunks per SENDMSG */
#define KU_REFILL_BULK  64u
#define KU_MBUF_IN_RING 0x5a17u        /* m->user while the kernel holds the buffer */

static_assert(KT_N_BUFS <= 65536, "buffer ids are 16 bits");

/* What a completion is for: its user_data is the socket's address with this in the low
 * bits (every kt_sock is 8-byte aligned). 0: a cancel's own completion. */
enum ku_tag { KU_NONE = 0, KU_RECV, KU_SEND, KU_CONN, KU_ACCEPT, KU_URECV, KU_WAKE };
#define KU_TAG_MASK 7u

struct ku_flow {
	struct fp_flow f;             /* first */
	TAILQ_ENTRY(ku_flow) dirty_link;
	struct msghdr msg;            /* the SENDMSG in flight */
	struct iovec iov[KU_TX_IOV];
	uint32_t tx_bytes;            /* taken by SENDV, not yet sent: the send budget used */
	uint32_t tx_off;              /* bytes of the first chunk already sent */
	uint16_t tx_head, tx_n;       /* ring of chunks, after held[] */
	bool recv_armed, send_busy, poll_armed, dirty;
	bool shut_pending;            /* SHUTDOWN with data queued: FIN once it is sent */
	bool release_pending;         /* CLOSE with data queued: close the fd once it is sent */
	bool aborted;
};

TAILQ_HEAD(ku_dirtyq, ku_flow);

struct ku {
	struct io_uring ring;
	bool ring_up;
	bool mshot_lim;               /* multishot recv takes a total limit (Linux 6.17) */
	struct io_uring_buf_ring *br;
	size_t br_bytes;
	uint32_t in_ring;             /* buffers the kernel holds */
	struct fp_pool *tx_pool;
	struct fp_pool_cache tx_cache;
	uint32_t tx_cap;              /* chunk slots per flow */
	struct ku_dirtyq dirty;       /* flows with data to send and no send in flight */
	struct msghdr udp_msg;        /* what multishot recvmsg lays out in each buffer */
	struct fp_mbuf *refill[KU_REFILL_BULK];
};

static inline struct ku *ku_of(const struct kt *kt) { return kt->es; }
static inline struct ku_flow *ku_flow(struct fp_flow *f) { return (struct ku_flow *)(void *)f; }

static inline struct fp_mbuf **ku_txq(const struct kt *kt, struct ku_flow *uf)
{
	return uf->f.held + kt->held_cap;
}

static inline struct fp_mbuf *ku_tx_at(const struct kt *kt, struct ku_flow *uf, unsigned i)
{
	return ku_txq(kt, uf)[(uf->tx_head + i) & (ku_of(kt)->tx_cap - 1)];
}

static inline uint64_t ku_ud(const struct kt_sock *s, enum ku_tag tag)
{
	return (uint64_t)(uintptr_t)s | tag;
}

/* A submission slot; when the queue is full, submit it early. NULL only if the kernel
 * refuses to take any (callers retry next round). */
static inline struct io_uring_sqe *ku_sqe(struct ku *ku)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ku->ring);

	if (fp_unlikely(!sqe)) {
		io_uring_submit(&ku->ring);
		sqe = io_uring_get_sqe(&ku->ring);
	}
	return sqe;
}

static inline void ku_fd_close(struct kt_sock *s)
{
	if (s->fd >= 0) {
		close(s->fd);
		s->fd = -1;
	}
}

/* kernel_uring.c */
/* The last completion of one of @s's operations: a closed socket may go now. */
void ku_op_end(struct kt *kt, struct kt_sock *s);

/* kernel_uring_tx.c: the send side */
int ku_tx_init(struct kt *kt, struct ku *ku);
void ku_tx_fini(struct kt *kt, struct ku *ku);          /* after the ring is gone */
int64_t ku_sendv(struct kt *kt, struct fp_flow *f, const struct iovec *iov,
		 unsigned iovcnt, size_t offered);
/* Send what @uf has queued unless a send is in flight; false when no submission slot
 * was to be had (it stays queued for the next flush). */
bool ku_send_next(struct kt *kt, struct ku_flow *uf);
bool ku_send_dirty(struct kt *kt);                      /* every flow with data queued */
void ku_send_cqe(struct kt *kt, struct ku_flow *uf, int res);
void ku_tx_drop(struct kt *kt, struct ku_flow *uf);
int ku_shutdown(struct kt *kt, struct fp_flow *f);

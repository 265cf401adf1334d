/* nic_rss.c: the NIC's own steering: its RSS key, hash fields and indirection table, through the ethtool ioctls. */
#include <errno.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <flowplane/dev.h>
#include <flowplane/rss.h>

/*
 * IX (OSDI'14 §4.4) lets the NIC do the steering: Toeplitz over the 4-tuple, the low bits
 * of the hash index an indirection table, the table names the queue, one queue per core.
 * rt/steer.c's groups are the hash's low 7 bits under the symmetric key, so the NIC
 * agrees with them when it uses that key, hashes TCP and UDP over addresses and ports,
 * and its table (a multiple of 128 entries, indexed by the hash's low bits as every
 * driver we know does) has at entry i the queue of group i % 128. What `ethtool -X dev
 * hkey ... hfunc toeplitz` and `ethtool -N dev rx-flow-hash tcp4 sdfn` do, through
 * SIOCETHTOOL (ETHTOOL_GRSSH/SRSSH, GRXFH/SRXFH).
 *
 * Everything it changes it puts back (fp_nic_rss_restore). A NIC that takes only part of
 * it (UDP hashed on addresses alone) is used for the rest: a frame that lands on another
 * worker's queue is still handed over in software, so this only saves hand-overs; it
 * never decides where a frame is handled.
 */

/* include/linux/ethtool.h's (kernel-internal in the 6.1 uapi): bit 0 is Toeplitz;
 * 0 in a set request leaves the function alone. */
#define NIC_HASH_TOP       1u
#define NIC_HASH_NO_CHANGE 0u
#define NIC_FIELDS_4TUPLE  (RXH_IP_SRC | RXH_IP_DST | RXH_L4_B_0_1 | RXH_L4_B_2_3)
#define NIC_INDIR_MAX      (1u << 16)   /* far above any NIC's; bounds what we allocate */
#define NIC_KEY_MAX        256u
#define NIC_KEY_MIN        16u          /* a 12-byte input's hash reads key bits 0..127 */

struct fp_nic_rss {
	struct fp_ethtool io;
	uint32_t indir_size, key_size;
	uint8_t hfunc;                /* what it had */
	struct ethtool_rxfh *old;     /* its table and key, as read */
	uint64_t fields[2];           /* its hash fields for TCP, UDP over IPv4 */
	bool changed_fields[2];
	bool udp;                     /* UDP is hashed over the 4-tuple too */
};

int fp_ethtool_ioctl(void *ifname, void *cmd)
{
	struct ifreq ifr;
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = 0;

	if (fd < 0)
		return -errno;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", (const char *)ifname);
	ifr.ifr_data = cmd;
	if (ioctl(fd, SIOCETHTOOL, &ifr) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

static size_t rxfh_bytes(uint32_t indir, uint32_t key)
{
	return sizeof(struct ethtool_rxfh) + (size_t)indir * sizeof(uint32_t) + key;
}

/* The whole table and key as the NIC has them now; NULL with -errno in *rc. */
static struct ethtool_rxfh *rxfh_read(const struct fp_ethtool *io, uint32_t indir, uint32_t key,
				      int *rc)
{
	struct ethtool_rxfh *r = calloc(1, rxfh_bytes(indir, key));

	if (!r)
		return *rc = -ENOMEM, NULL;
	r->cmd = ETHTOOL_GRSSH;
	r->indir_size = indir;
	r->key_size = key;
	if ((*rc = io->call(io->arg, r)) == 0 && (r->indir_size != indir || r->key_size != key))
		*rc = -EIO;   /* it changed size under us */
	if (*rc)
		return free(r), NULL;
	return r;
}

static int rxfh_write(const struct fp_ethtool *io, const struct ethtool_rxfh *src, uint8_t hfunc)
{
	size_t n = rxfh_bytes(src->indir_size, src->key_size);
	struct ethtool_rxfh *w = malloc(n);
	int rc;

	if (!w)
		return -ENOMEM;
	memcpy(w, src, n);
	w->cmd = ETHTOOL_SRSSH;
	w->rss_context = 0;
	w->hfunc = hfunc;
	rc = io->call(io->arg, w);
	free(w);
	return rc;
}

static int fields_get(const struct fp_ethtool *io, uint32_t flow, uint64_t *out)
{
	struct ethtool_rxnfc c = { .cmd = ETHTOOL_GRXFH, .flow_type = flow };
	int rc = io->call(io->arg, &c);

	*out = c.data;
	return rc;
}

static int fields_set(const struct fp_ethtool *io, uint32_t flow, uint64_t fields)
{
	struct ethtool_rxnfc c = { .cmd = ETHTOOL_SRXFH, .flow_type = flow, .data = fields };

	return io->call(io->arg, &c);
}

/* TCP (i = 0) or UDP (1) over IPv4 hashed over the 4-tuple: as it was, or set so. */
static int fields_4tuple(struct fp_nic_rss *s, unsigned i)
{
	uint32_t flow = i ? UDP_V4_FLOW : TCP_V4_FLOW;
	int rc = fields_get(&s->io, flow, &s->fields[i]);

	if (rc)
		return rc;
	if ((s->fields[i] & NIC_FIELDS_4TUPLE) == NIC_FIELDS_4TUPLE)
		return 0;
	if ((rc = fields_set(&s->io, flow, NIC_FIELDS_4TUPLE)))
		return rc;
	s->changed_fields[i] = true;
	return 0;
}

void fp_nic_rss_restore(struct fp_nic_rss *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < 2; i++)
		if (s->changed_fields[i])
			fields_set(&s->io, i ? UDP_V4_FLOW : TCP_V4_FLOW, s->fields[i]);
	if (s->old)
		rxfh_write(&s->io, s->old, s->hfunc == NIC_HASH_TOP ? NIC_HASH_NO_CHANGE : s->hfunc);
	/* (hfunc 0: the driver did not say which it had; it stays at Toeplitz) */
	free(s->old);
	free(s);
}

/* What the NIC reports (sizes, function) and whether our table can be said in it. */
static int nic_rss_probe(struct fp_nic_rss *s, char *why, size_t len)
{
	struct ethtool_rxfh q = { .cmd = ETHTOOL_GRSSH };
	int rc = s->io.call(s->io.arg, &q);

	if (rc)
		return snprintf(why, len, "it has no RSS table to set (ethtool -x: %s)",
				strerror(-rc)), rc;
	s->indir_size = q.indir_size;
	s->key_size = q.key_size;
	s->hfunc = q.hfunc;
	if (!q.indir_size || q.indir_size % FP_RSS_GROUPS || q.indir_size > NIC_INDIR_MAX)
		return snprintf(why, len, "its indirection table has %u entries, not a multiple "
				"of the %u flow groups", q.indir_size, FP_RSS_GROUPS), -EOPNOTSUPP;
	if (q.key_size < NIC_KEY_MIN || q.key_size > NIC_KEY_MAX)
		return snprintf(why, len, "its RSS key is %u bytes; Toeplitz over an IPv4 4-tuple "
				"needs %u", q.key_size, NIC_KEY_MIN), -EOPNOTSUPP;
	return 0;
}

struct fp_nic_rss *fp_nic_rss_program(const struct fp_ethtool *io, const uint8_t *key,
				      const uint16_t queue_of_group[], char *why, size_t len)
{
	struct fp_nic_rss *s = calloc(1, sizeof(*s));
	struct ethtool_rxfh *w = NULL, *back = NULL;
	int rc;

	if (!s)
		return snprintf(why, len, "out of memory"), errno = ENOMEM, NULL;
	s->io = *io;
	if ((rc = nic_rss_probe(s, why, len)))
		goto fail;
	if (!(s->old = rxfh_read(io, s->indir_size, s->key_size, &rc))) {
		snprintf(why, len, "reading its RSS table: %s", strerror(-rc));
		goto fail;
	}
	if ((rc = fields_4tuple(s, 0))) {
		snprintf(why, len, "it will not hash TCP over addresses and ports (ethtool -N "
			 "rx-flow-hash tcp4 sdfn: %s)", strerror(-rc));
		goto fail;
	}
	s->udp = fields_4tuple(s, 1) == 0;   /* if not, UDP frames are handed over */
	if (!(w = calloc(1, rxfh_bytes(s->indir_size, s->key_size)))) {
		rc = -ENOMEM;
		snprintf(why, len, "out of memory");
		goto fail;
	}
	w->indir_size = s->indir_size;
	w->key_size = s->key_size;
	for (uint32_t i = 0; i < s->indir_size; i++)
		w->rss_config[i] = queue_of_group[i % FP_RSS_GROUPS];
	/* A longer key (i40e and ice take 52 bytes) goes on cyclically: only its first 16
	 * bytes touch an IPv4 4-tuple's hash, and the symmetric key's period divides 40. */
	uint8_t *k = (uint8_t *)&w->rss_config[s->indir_size];
	for (uint32_t i = 0; i < s->key_size; i++)
		k[i] = key[i % FP_RSS_KEY_LEN];
	if ((rc = rxfh_write(io, w, s->hfunc == NIC_HASH_TOP ? NIC_HASH_NO_CHANGE : NIC_HASH_TOP))) {
		snprintf(why, len, "it refused the table, key or Toeplitz (ethtool -X: %s)",
			 strerror(-rc));
		goto fail;
	}
	/* A driver may round a table or ignore a key and still say yes: read it back. */
	if (!(back = rxfh_read(io, s->indir_size, s->key_size, &rc)) ||
	    (back->hfunc && back->hfunc != NIC_HASH_TOP) ||
	    memcmp(back->rss_config, w->rss_config,
		   (size_t)s->indir_size * sizeof(uint32_t) + s->key_size)) {
		rc = rc ? rc : -EIO;
		snprintf(why, len, "it did not keep the table it was given");
		goto fail;
	}
	free(back);
	free(w);
	return s;
fail:
	free(back);
	free(w);
	fp_nic_rss_restore(s);
	errno = -rc;
	return NULL;
}

unsigned fp_nic_rss_entries(const struct fp_nic_rss *s) { return s->indir_size; }

bool fp_nic_rss_udp(const struct fp_nic_rss *s) { return s->udp; }

/* rss.h: the Toeplitz hash NICs use for receive-side scaling, plain and symmetric. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define FP_RSS_KEY_LEN 40

/* IX's flow groups: the low bits of a flow's hash pick one of FP_RSS_GROUPS groups, as a
 * NIC's 128-entry indirection table does; a table maps each group to a queue (worker). */
#define FP_RSS_GROUPS 128

static inline unsigned fp_rss_group(uint32_t hash) { return hash & (FP_RSS_GROUPS - 1); }

/* Microsoft's verification key (the default of most NICs). */
extern const uint8_t fp_rss_key_default[FP_RSS_KEY_LEN];

/* 0x6d5a repeated (Woo and Park, "Scalable TCP session monitoring with symmetric RSS",
 * 2012): with a key of period 16 bits, swapping source and destination addresses (32 bits)
 * and ports (16 bits) gives the same hash, so both directions of a flow share a queue. */
extern const uint8_t fp_rss_key_symmetric[FP_RSS_KEY_LEN];

/* Reference Toeplitz hash of @len bytes of input (len + 4 <= key_len): bit by bit, slow. */
uint32_t fp_toeplitz(const uint8_t *key, size_t key_len, const uint8_t *data, size_t len);

/*
 * A key expanded into per-byte tables: the hash of an IPv4 4-tuple is 12 table lookups
 * and XORs. 12 KiB; one per device, read-only, shared by every core.
 */
struct fp_rss {
	uint32_t tbl[12][256];
};

/* Expand @key (FP_RSS_KEY_LEN bytes) for hashing up to 12 bytes of input. */
void fp_rss_init(struct fp_rss *r, const uint8_t *key);

/* Hash of IPv4 source and destination addresses (network order, as in the packet). */
uint32_t fp_rss_ipv4(const struct fp_rss *r, uint32_t saddr_be, uint32_t daddr_be);

/* Hash of the IPv4 TCP/UDP 4-tuple; everything in network order, as in the packet. */
uint32_t fp_rss_ipv4_l4(const struct fp_rss *r, uint32_t saddr_be, uint32_t daddr_be,
			uint16_t sport_be, uint16_t dport_be);

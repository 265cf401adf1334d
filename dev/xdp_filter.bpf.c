/* xdp_filter.bpf.c: steer flowplane's IPv4 address (and ARP for it) to AF_XDP; pass the rest, copying other hosts' ARP. */
#include <linux/bpf.h>
#include <linux/if_ether.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/*
 * The one XDP program flowplane attaches. An interface is shared with the host: only
 * frames for the address flowplane owns go to the AF_XDP socket of the queue they arrived
 * on; everything else (the host's own addresses, IPv6, LLDP, 802.1Q-tagged frames, which
 * the stack would drop anyway) is XDP_PASS. Nothing is ever dropped here.
 *
 * Keep in step with struct xdp_cfg in af_xdp.c: user space fills fp_cfg before attaching,
 * and reads owner_pid back from a program left attached to tell a crashed run from a live one.
 */
struct xdp_cfg {
	__u32 ipv4;        /* network byte order */
	__u32 owner_pid;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdp_cfg);
} fp_cfg SEC(".maps");

/* Sized to the interface's queue count by the loader before load. */
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} fp_xsks SEC(".maps");

/* Other hosts' ARP frames, for user space to learn from (RFC 826's merge rule: a sender
 * already in our table is updated from any ARP we see; a gratuitous ARP is how a
 * neighbour says its MAC changed). The frame itself still goes to the kernel: XDP
 * cannot both pass a frame and redirect it. Full: the copy is dropped, nothing else. */
#define ARP_FRAME 42   /* Ethernet header + Ethernet/IPv4 ARP */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 14);
} fp_arps SEC(".maps");

/* ARP for Ethernet/IPv4 (RFC 826): fixed 28 bytes. */
struct arp_eth_ipv4 {
	__be16 htype, ptype;
	__u8 hlen, plen;
	__be16 op;
	__u8 sha[ETH_ALEN];
	__u8 spa[4];
	__u8 tha[ETH_ALEN];
	__u8 tpa[4];
} __attribute__((packed));

/* Does the frame past the Ethernet header belong to @addr? Bounds are checked against
 * @end before every read, as the verifier requires. */
static __always_inline int ours(void *l3, void *end, __u16 type, __u32 addr)
{
	if (type == bpf_htons(ETH_P_IP)) {
		/* daddr is at byte 16 of the header; the fixed 20 bytes cover it */
		__u8 *ip = l3;
		__u32 daddr;
		if ((void *)(ip + 20) > end)
			return 0;
		__builtin_memcpy(&daddr, ip + 16, 4);  /* 2-aligned in the frame: no u32 load */
		return (ip[0] >> 4) == 4 && daddr == addr;
	}
	if (type == bpf_htons(ETH_P_ARP)) {
		struct arp_eth_ipv4 *arp = l3;
		__u32 tpa;
		if ((void *)(arp + 1) > end)
			return 0;
		if (arp->htype != bpf_htons(1) || arp->ptype != bpf_htons(ETH_P_IP) ||
		    arp->hlen != ETH_ALEN || arp->plen != 4)
			return 0;
		/* requests for us and replies to our requests both name us as target */
		__builtin_memcpy(&tpa, arp->tpa, 4);
		if (tpa != addr) {
			__u8 frame[ARP_FRAME];

			__builtin_memcpy(frame, (__u8 *)l3 - ETH_HLEN, ARP_FRAME);
			bpf_ringbuf_output(&fp_arps, frame, ARP_FRAME, 0);
		}
		return tpa == addr;
	}
	return 0;  /* 802.1Q/802.1ad tags, IPv6, anything else: the host's */
}

SEC("xdp")
int fp_xdp_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	__u32 zero = 0;
	struct xdp_cfg *cfg;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
	cfg = bpf_map_lookup_elem(&fp_cfg, &zero);
	if (!cfg || !ours(eth + 1, end, eth->h_proto, cfg->ipv4))
		return XDP_PASS;
	/* no socket on this queue (not opened yet, or closed): the flags' low bits are the
	 * action taken instead, so the kernel keeps the frame */
	return bpf_redirect_map(&fp_xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";

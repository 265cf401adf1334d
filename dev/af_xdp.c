/* af_xdp.c: placeholder until its helper lands. */
typedef int fp_placeholder_t;

/* dist.c: (being written) */

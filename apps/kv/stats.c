/* stats.c: (being written) */

/* check.c: (being written) */

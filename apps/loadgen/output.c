/* output.c: (being written) */

/* arrival.c: (being written) */

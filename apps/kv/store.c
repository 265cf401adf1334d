/* store.c: (being written) */

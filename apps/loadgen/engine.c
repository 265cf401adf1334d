/* engine.c: (being written) */

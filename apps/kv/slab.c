/* slab.c: (being written) */

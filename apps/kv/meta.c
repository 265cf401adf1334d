/* meta.c: (being written) */

/* proto.c: (being written) */

/* proto_spin.c: (being written) */

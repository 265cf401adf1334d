/* proto_memcache.c: (being written) */

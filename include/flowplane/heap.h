/* heap.h: giving free heap memory back to the system. */
#pragma once

/*
 * malloc_trim(0), and then what it leaves out: it returns whole free pages inside every
 * arena but shrinks only the main arena's top, so the calling thread's own arena (glibc
 * gives each thread one) keeps its free top until a free() of 64 KiB or more merges into
 * it; fp_heap_trim makes one. Call it from the thread whose memory was freed. It walks the
 * heap: about a millisecond for tens of MB.
 */
void fp_heap_trim(void);

/* heap.c: fp_heap_trim (heap.h). */
#include <malloc.h>
#include <stdlib.h>

#include <flowplane/heap.h>

void fp_heap_trim(void)
{
	void *volatile blk;   /* volatile: the compiler would drop the pair */

	malloc_trim(0);
	blk = malloc(64u << 10);
	free(blk);
}

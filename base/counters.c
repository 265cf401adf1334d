/* counters.c: allocation and summing of per-core counters. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <flowplane/counters.h>

int fp_counters_init(struct fp_counters *c, unsigned n_cores, unsigned n_counters,
		     const char *const *names)
{
	const unsigned per_line = FP_CACHE_LINE / sizeof(uint64_t);

	if (n_cores == 0 || n_counters == 0)
		return -EINVAL;
	c->n_cores = n_cores;
	c->n_counters = n_counters;
	c->stride = (n_counters + per_line - 1) / per_line * per_line;
	c->names = names;
	size_t bytes = (size_t)n_cores * c->stride * sizeof(uint64_t);
	c->rows = aligned_alloc(FP_CACHE_LINE, bytes);
	if (!c->rows)
		return -ENOMEM;
	memset(c->rows, 0, bytes);
	return 0;
}

void fp_counters_destroy(struct fp_counters *c)
{
	free(c->rows);
	c->rows = NULL;
}

uint64_t fp_counters_get(const struct fp_counters *c, unsigned core, unsigned id)
{
	return __atomic_load_n(&c->rows[(size_t)core * c->stride + id], __ATOMIC_RELAXED);
}

uint64_t fp_counters_sum(const struct fp_counters *c, unsigned id)
{
	uint64_t sum = 0;
	for (unsigned core = 0; core < c->n_cores; core++)
		sum += fp_counters_get(c, core, id);
	return sum;
}

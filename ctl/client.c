/* client.c: the latency the clients see, from fp-loadgen's progress lines as they are written (fp-ctl watch and run --client). */
#include <stdio.h>
#include <string.h>

#include "ctl.h"

/*
 * The runtime cannot see a request's time in the NIC's queue, nor the wire's; the
 * generator measures from each request's scheduled send. Its stderr has one line per
 * point ("fp-loadgen: point N/M ... p99 X us ..."); each read takes what was appended to
 * the file since, and keeps the last whole line's figures.
 */
static void client_line(struct ctl_client *c, const char *line)
{
	unsigned i, n;
	const char *p99 = strstr(line, "  p99 ");
	double v;

	if (sscanf(line, "fp-loadgen: point %u/%u", &i, &n) == 2 && p99 &&
	    sscanf(p99, "  p99 %lf us", &v) == 1) {
		c->point = i;
		c->points = n;
		c->p99_us = v;
	}
}

void ctl_client_read(struct ctl_client *c)
{
	int ch;

	clearerr(c->f);   /* the writer may have added more since the last end of file */
	while ((ch = fgetc(c->f)) != EOF) {
		if (ch != '\n') {
			if (c->n_part < sizeof(c->part) - 1)
				c->part[c->n_part++] = (char)ch;
			continue;
		}
		c->part[c->n_part] = '\0';
		client_line(c, c->part);
		c->n_part = 0;
	}
}

/* batch.c: the consolidation objective's batch job (IX's background task): a real process confined to the cores of parked workers by a cpuset cgroup, stopped while none is spare. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctl.h"

/*
 * The job runs `sh -c CMD` in a process group of its own, inside a cgroup made for it:
 * cgroup v2 where the unified hierarchy offers the cpuset controller, else v1's cpuset
 * hierarchy; where neither can be used, the CPU affinity of the job's first process (its
 * later children inherit it only when they start: weaker, and the startup line says so).
 * Its cores are those of the parked workers. With none spare it is stopped (SIGSTOP to
 * its group) and continued when a core comes back; a core is taken from it before the
 * worker on it polls again (ctl/loop.c keeps that order). At the end: SIGTERM, then
 * SIGKILL after 2 s, and the cgroup is removed.
 */

static int write_file(const char *dir, const char *name, const char *text)
{
	char path[400];
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		rc = -errno;
	close(fd);
	return rc;
}

static int read_file(const char *dir, const char *name, char *out, size_t len)
{
	char path[400];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (!(f = fopen(path, "re")))
		return -errno;
	if (!fgets(out, (int)len, f))
		out[0] = '\0';
	fclose(f);
	out[strcspn(out, "\n")] = '\0';
	return 0;
}

/* "0,3,5" from a mask of CPUs. */
static void cpu_list(uint64_t cpus, char *out, size_t len)
{
	size_t o = 0;

	out[0] = '\0';
	for (unsigned c = 0; c < 64 && o < len; c++)
		if ((cpus >> c) & 1)
			o += (size_t)snprintf(out + o, len - o, "%s%u", o ? "," : "", c);
}

/* A mount point of @fstype whose super options (v1) name @opt, or any (v2); 0 or -ENOENT. */
static int find_mount(const char *fstype, const char *opt, char *out, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[1024];
	int rc = -ENOENT;

	if (!f)
		return -errno;
	while (rc && fgets(line, sizeof(line), f)) {
		char mnt[512], type[64], super[512];
		char *sep = strstr(line, " - ");
		unsigned field = 0;
		char *save, *tok;

		if (!sep || sscanf(sep + 3, "%63s %*s %511s", type, super) != 2 || strcmp(type, fstype))
			continue;
		mnt[0] = '\0';
		for (tok = strtok_r(line, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
			if (++field == 5) {
				snprintf(mnt, sizeof(mnt), "%s", tok);
				break;
			}
		if (!mnt[0] || (opt && !strstr(super, opt)))
			continue;
		snprintf(out, len, "%s", mnt);
		rc = 0;
	}
	fclose(f);
	return rc;
}

/* A cgroup for the job: v2 with cpuset, else v1's cpuset hierarchy; 0 with b->dir set. */
static int make_cgroup(struct ctl_batch *b, char *err, size_t errlen)
{
	char mnt[512], buf[256];

	if (!find_mount("cgroup2", NULL, mnt, sizeof(mnt)) &&
	    !read_file(mnt, "cgroup.controllers", buf, sizeof(buf)) && strstr(buf, "cpuset") &&
	    (!read_file(mnt, "cgroup.subtree_control", buf, sizeof(buf)) &&
	     (strstr(buf, "cpuset") || !write_file(mnt, "cgroup.subtree_control", "+cpuset")))) {
		snprintf(b->dir, sizeof(b->dir), "%.260s/fp-batch-%d", mnt, (int)getpid());
		if (!mkdir(b->dir, 0755)) {
			b->how = CTL_BATCH_CGROUP2;
			return 0;
		}
	}
	if (!find_mount("cgroup", "cpuset", mnt, sizeof(mnt))) {
		snprintf(b->dir, sizeof(b->dir), "%.260s/fp-batch-%d", mnt, (int)getpid());
		if (!mkdir(b->dir, 0755)) {
			/* v1 wants the memory nodes set before a task may join */
			if (read_file(mnt, "cpuset.mems", buf, sizeof(buf)) ||
			    write_file(b->dir, "cpuset.mems", buf)) {
				snprintf(err, errlen, "cannot set %s/cpuset.mems", b->dir);
				rmdir(b->dir);
				return -EIO;
			}
			b->how = CTL_BATCH_CGROUP1;
			return 0;
		}
	}
	b->dir[0] = '\0';
	b->how = CTL_BATCH_AFFINITY;
	return 0;
}

static int set_affinity(pid_t pid, uint64_t cpus)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	for (unsigned c = 0; c < 64; c++)
		if ((cpus >> c) & 1)
			CPU_SET(c, &set);
	return sched_setaffinity(pid, sizeof(set), &set) ? -errno : 0;
}

const char *ctl_batch_how(const struct ctl_batch *b)
{
	switch (b->how) {
	case CTL_BATCH_CGROUP2: return "a cgroup v2 cpuset";
	case CTL_BATCH_CGROUP1: return "a cgroup v1 cpuset";
	case CTL_BATCH_AFFINITY: return "CPU affinity (no cpuset cgroup to use: its later "
					"children keep the cores they started with)";
	}
	return "nothing";
}

int ctl_batch_start(struct ctl_batch *b, const char *cmd, uint64_t all, uint64_t cpus,
		    unsigned flags, char *err, size_t errlen)
{
	char list[256];
	int st, rc;

	memset(b, 0, sizeof(*b));
	b->pid = -1;
	b->how = CTL_BATCH_AFFINITY;
	if (!(flags & CTL_BATCH_NO_CGROUP) && (rc = make_cgroup(b, err, errlen)))
		return rc;
	/* the cores it may ever have; stopped meanwhile if none is spare now */
	cpu_list(cpus ? cpus : all, list, sizeof(list));
	if (b->how != CTL_BATCH_AFFINITY && (rc = write_file(b->dir, "cpuset.cpus", list))) {
		snprintf(err, errlen, "cannot set %s/cpuset.cpus to %s: %s", b->dir, list,
			 strerror(-rc));
		rmdir(b->dir);
		return rc;
	}
	b->pid = fork();
	if (b->pid < 0) {
		rc = -errno;
		snprintf(err, errlen, "fork: %s", strerror(errno));
		if (b->dir[0])
			rmdir(b->dir);
		return rc;
	}
	if (!b->pid) {
		struct sched_param sp = { 0 };
		char me[32];

		setpgid(0, 0);
		dup2(2, 1);                        /* its output apart from the loop's lines */
		prctl(PR_SET_PDEATHSIG, SIGKILL);   /* a controller killed outright takes it along */
		snprintf(me, sizeof(me), "%d\n", (int)getpid());
		if (b->how == CTL_BATCH_AFFINITY ? set_affinity(0, cpus ? cpus : all) != 0
						 : write_file(b->dir, "cgroup.procs", me) != 0)
			_exit(126);
		if ((flags & CTL_BATCH_IDLE) && sched_setscheduler(0, SCHED_IDLE, &sp) < 0)
			_exit(126);
		raise(SIGSTOP);         /* the parent decides when it may run */
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	setpgid(b->pid, b->pid);        /* either side first: no race on the group */
	if (waitpid(b->pid, &st, WUNTRACED) != b->pid || !WIFSTOPPED(st)) {
		snprintf(err, errlen, "the batch job did not start (it could not join %s%s)",
			 b->dir[0] ? b->dir : "its cores",
			 flags & CTL_BATCH_IDLE ? " at SCHED_IDLE" : "");
		if (b->dir[0])
			rmdir(b->dir);
		b->pid = -1;
		return -ECHILD;
	}
	b->stopped = true;
	b->cpus = cpus ? cpus : all;
	return ctl_batch_set(b, cpus);
}

int ctl_batch_set(struct ctl_batch *b, uint64_t cpus)
{
	char list[256];
	int rc = 0;

	if (b->pid <= 0 || b->exited)
		return 0;
	if (!cpus) {
		if (!b->stopped && kill(-b->pid, SIGSTOP) == 0)
			b->stopped = true;
		return 0;
	}
	if (cpus != b->cpus) {
		if (b->how == CTL_BATCH_AFFINITY) {
			char dir[64];
			DIR *d;
			struct dirent *e;

			snprintf(dir, sizeof(dir), "/proc/%d/task", (int)b->pid);
			if ((d = opendir(dir))) {
				while ((e = readdir(d)))
					if (e->d_name[0] != '.')
						set_affinity(atoi(e->d_name), cpus);
				closedir(d);
			}
		} else {
			cpu_list(cpus, list, sizeof(list));
			rc = write_file(b->dir, "cpuset.cpus", list);
		}
		if (!rc) {
			b->cpus = cpus;
			b->changes++;
		}
	}
	if (b->stopped && kill(-b->pid, SIGCONT) == 0)
		b->stopped = false;
	return rc;
}

/* Reap the job if it has ended (@options 0: wait for it), taking its CPU time. */
static void reap(struct ctl_batch *b, int options)
{
	struct rusage ru;
	int st;

	while (!b->exited && wait4(b->pid, &st, options | WUNTRACED | WCONTINUED, &ru) == b->pid)
		if (WIFEXITED(st) || WIFSIGNALED(st)) {
			b->exited = true;
			b->status = st;
			b->cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
				   ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
		}
}

bool ctl_batch_alive(struct ctl_batch *b)
{
	if (b->pid <= 0)
		return false;
	reap(b, WNOHANG);
	return !b->exited;
}

double ctl_batch_end(struct ctl_batch *b)
{
	if (ctl_batch_alive(b)) {
		kill(-b->pid, SIGTERM);
		kill(-b->pid, SIGCONT);
		for (int i = 0; i < 200 && !b->exited; i++) {
			struct timespec ts = { 0, 10000000 };

			nanosleep(&ts, NULL);
			reap(b, WNOHANG);
		}
		if (!b->exited) {
			kill(-b->pid, SIGKILL);
			reap(b, 0);
		}
	} else if (b->pid > 0) {
		b->by_itself = true;
	}
	if (b->pid > 0)
		kill(-b->pid, SIGKILL);       /* what the shell left behind */
	/* the cgroup empties once the group's last process is gone */
	for (int i = 0; b->dir[0] && i < 100 && rmdir(b->dir) && errno == EBUSY; i++) {
		struct timespec ts = { 0, 10000000 };

		nanosleep(&ts, NULL);
	}
	b->pid = -1;
	return b->cpu_s;
}

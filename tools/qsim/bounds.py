# bounds.py: theoretical latency bounds from qsim, to draw beside measured load-latency curves.
"""Theoretical latency-vs-load bounds from the qsim simulator, for plots.

The load generator's plots (or any matplotlib code) call this to draw what an ideal,
zero-overhead queueing model predicts next to what was measured::

    import sys; sys.path.insert(0, "tools/qsim")     # or: from tools.qsim import bounds
    import bounds

    fig, ax = plt.subplots()
    ax.plot(mrps, p99_us, "o-", label="flowplane, 4 cores")
    bounds.draw_bound(ax, servers=4, disc="fcfs", dist="exp", mean_us=10,
                      x="mrps", y="p99_us")            # M/M/4 FCFS: the best possible
    bounds.draw_bound(ax, servers=4, disc="part", dist="exp", mean_us=10,
                      x="mrps", y="p99_us")            # 4 x M/M/1: partitioned cores

Functions:
    find_qsim()        path of the qsim binary ($FP_QSIM, else $FP_BUILD_DIR or
                       build/release, + tools/qsim/qsim)
    run_qsim(args)     run qsim with --format json and return the parsed object
    bound_curve(...)   one curve: a dict of lists keyed like qsim's JSON points
    draw_bound(ax,...) plot bound_curve() on a matplotlib Axes, grey and dashed
    max_load(...)      highest load meeting an SLO (qsim --max-load)

Results are cached per argument set for the life of the process; a curve of 40 points
at 10^6 requests each costs about a second.
"""

import functools
import json
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DEFAULT_LOADS = tuple(round(0.025 * i, 3) for i in range(1, 40))  # 0.025 .. 0.975

DISC_LABELS = {
    "fcfs": "M/G/{n}/FCFS",
    "part": "{n}xM/G/1/FCFS",
    "ps": "M/G/{n}/PS",
    "part-ps": "{n}xM/G/1/PS",
    "steal": "{n}xM/G/1 + stealing",
}

X_KEYS = {"load": "load", "mrps": "rate_mrps", "rate_mrps": "rate_mrps",
          "krps": "rate_krps", "cores": "offered_cores", "offered_cores": "offered_cores"}


class QsimError(RuntimeError):
    """qsim refused its arguments or failed; the message is its one-line error."""


def find_qsim():
    """Path of the qsim binary: $FP_QSIM, else <$FP_BUILD_DIR or build/release>/tools/qsim/qsim."""
    if os.environ.get("FP_QSIM"):
        return os.environ["FP_QSIM"]
    build = os.environ.get("FP_BUILD_DIR", os.path.join(REPO, "build", "release"))
    if not os.path.isabs(build):
        build = os.path.join(REPO, build)
    return os.path.join(build, "tools", "qsim", "qsim")


def run_qsim(args, qsim=None):
    """Run qsim with @args plus --format json; return the parsed JSON object."""
    cmd = [qsim or find_qsim(), *map(str, args), "--format", "json", "--quiet"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as e:
        raise QsimError(f"cannot run {cmd[0]}: {e.strerror} (build it, or set FP_QSIM)") from e
    if out.returncode != 0:
        raise QsimError(out.stderr.strip() or f"qsim exited with {out.returncode}")
    return json.loads(out.stdout)


def _model_args(servers, disc, dist, mean_us, percentile, slo_mult, extra):
    args = ["--servers", servers, "--disc", disc, "--dist", dist,
            "--slo-pct", percentile, "--slo-mult", slo_mult, *extra]
    if mean_us is not None:
        args += ["--mean-us", mean_us]
    return args


@functools.lru_cache(maxsize=256)
def _curve(servers, disc, dist, mean_us, loads, requests, seed, percentile, extra):
    args = _model_args(servers, disc, dist, mean_us, percentile, 10, extra)
    args += ["--load", ",".join(f"{x:g}" for x in loads), "--requests", requests,
             "--seed", seed]
    return run_qsim(args)


def bound_curve(servers=16, disc="fcfs", dist="exp", mean_us=10.0, loads=DEFAULT_LOADS,
                requests=1_000_000, seed=1, percentile=99, extra=()):
    """Latency against load for one ideal model.

    Returns a dict of equal-length lists, one entry per load, keyed like qsim's JSON
    points: load, rate_mrps, rate_krps, offered_cores, p50/p99/p999 (in mean service
    times), p50_us/p99_us/p999_us, p_slo/p_slo_us (the @percentile asked for), mean_us,
    efficiency. @disc is fcfs, part, ps, part-ps or steal; @dist as qsim --dist; @extra
    is a tuple of further qsim arguments (e.g. ("--steal-cost-us", "1")).
    """
    data = _curve(int(servers), disc, dist, None if mean_us is None else float(mean_us),
                  tuple(float(x) for x in loads), int(requests), int(seed), float(percentile),
                  tuple(map(str, extra)))
    points = data["points"]
    curve = {k: [p[k] for p in points] for k in points[0]} if points else {}
    curve["rate_krps"] = [r * 1000 for r in curve.get("rate_mrps", [])]
    curve["config"] = data["config"]
    return curve


def bound_label(servers, disc, dist):
    """A legend label such as "M/G/16/FCFS bound, exp"."""
    return DISC_LABELS.get(disc, disc).format(n=servers) + f" bound, {dist}"


def draw_bound(ax, servers=16, disc="fcfs", dist="exp", mean_us=10.0, x="mrps", y="p99_us",
               loads=DEFAULT_LOADS, requests=1_000_000, seed=1, percentile=99, label=None,
               extra=(), **plot_kw):
    """Plot a bound on matplotlib Axes @ax; returns the Line2D.

    @x: load (fraction of n cores), mrps, krps or cores (offered load in cores).
    @y: any point key: p99_us (default), p999_us, p50_us, mean_us; p99 etc. in units of
    the mean service time; p_slo_us for an arbitrary @percentile (e.g. 99.99).
    Further keyword arguments go to ax.plot (default: grey, dashed).
    """
    if x not in X_KEYS:
        raise ValueError(f"x must be one of {sorted(X_KEYS)}, not {x!r}")
    curve = bound_curve(servers, disc, dist, mean_us, loads, requests, seed, percentile,
                        extra)
    if y not in curve:
        raise ValueError(f"y must be a qsim point key such as p99_us, not {y!r}")
    style = {"color": "0.5", "linestyle": "--", "linewidth": 1.2}
    style.update(plot_kw)
    return ax.plot(curve[X_KEYS[x]], curve[y], label=label or bound_label(servers, disc, dist),
                   **style)[0]


@functools.lru_cache(maxsize=256)
def max_load(servers=16, disc="fcfs", dist="exp", slo_mult=10.0, percentile=99,
             requests=2_000_000, seed=1, resolution=0.001, extra=()):
    """Highest load (fraction of n cores) whose @percentile latency is <= @slo_mult mean
    service times, by qsim's bisection to within @resolution; 0.0 if none."""
    args = _model_args(servers, disc, dist, None, percentile, slo_mult, extra)
    args += ["--max-load", "--requests", requests, "--seed", seed, "--resolution", resolution]
    return run_qsim(args)["max_load"]["load"]

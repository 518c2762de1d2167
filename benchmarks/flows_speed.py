"""Flow and layer speed: inference.flows vs zuko and Pyro; Bayesian/noisy layers vs nn.Linear (same run).

    python benchmarks/flows_speed.py [--reps 30] [--dims 2 16 64]

Flows (4 steps, unconditional, batch 256): time of ``d = flow(); z = d.rsample((256,)); d.log_prob(z)``
("fwd") and of the same plus ``backward()`` ("fwd+bwd").  Peers: Pyro's Planar, Radial, Sylvester
(Householder) and AffineAutoregressive(stable=True) (gated IAF); zuko has no planar/radial/Sylvester, so its
row is the IAF direction of its MaskedAutoregressiveTransform (``LazyInverse``, ``rsample_and_log_prob``).
Measurements are interleaved (every implementation once per repetition).  Ratios use the *minimum* over
repetitions (the least-disturbed run: the machine is a shared 2-core CPU where other processes add
large, random delays); medians are stored too.  CPU, one thread.
Layers: 256 -> 256, batch 256, forward + backward, train mode, ratio to ``nn.Linear``.
Results: benchmarks/results/flows_speed.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inference.flows import iaf_flow, planar_flow, radial_flow, sylvester_flow  # noqa: E402
from inference.layers import BayesLinear, MNFLinear, NoisyLinear  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "flows_speed.json")
STEPS, BATCH = 4, 256


def ours(make):
    flow = make()

    def run(backward):
        d = flow()
        lp = d.log_prob(d.rsample((BATCH,)))
        if backward:
            lp.mean().backward()
    return run, flow


def pyro_flow(make_transforms, dim):
    import pyro.distributions as pdist
    ts = nn.ModuleList(make_transforms())
    base = pdist.Normal(torch.zeros(dim), torch.ones(dim)).to_event(1)

    def run(backward):
        d = pdist.TransformedDistribution(base, list(ts))
        lp = d.log_prob(d.rsample((BATCH,)))
        if backward:
            lp.mean().backward()
    return run, ts


def zuko_iaf(dim):
    import zuko
    from zuko.flows.autoregressive import MaskedAutoregressiveTransform
    orders = [torch.arange(dim), torch.arange(dim).flip(0)]
    flow = zuko.flows.Flow(
        [zuko.flows.LazyInverse(MaskedAutoregressiveTransform(dim, order=orders[k % 2], hidden_features=(64, 64)))
         for k in range(STEPS)],
        zuko.flows.UnconditionalDistribution(zuko.distributions.DiagNormal, torch.zeros(dim), torch.ones(dim),
                                             buffer=True))

    def run(backward):
        _, lp = flow().rsample_and_log_prob((BATCH,))
        if backward:
            lp.mean().backward()
    return run, flow


def flow_rows(dim):
    import pyro.distributions.transforms as T
    from pyro.nn import AutoRegressiveNN
    impls = {
        ("planar", "ours"): ours(lambda: planar_flow(dim, STEPS)),
        ("planar", "pyro"): pyro_flow(lambda: [T.Planar(dim) for _ in range(STEPS)], dim),
        ("radial", "ours"): ours(lambda: radial_flow(dim, STEPS)),
        ("radial", "pyro"): pyro_flow(lambda: [T.Radial(dim) for _ in range(STEPS)], dim),
        ("iaf", "ours"): ours(lambda: iaf_flow(dim, STEPS, hidden=64)),
        ("iaf", "pyro"): pyro_flow(lambda: [T.AffineAutoregressive(
            AutoRegressiveNN(dim, [64, 64], permutation=torch.arange(dim) if k % 2 == 0 else torch.arange(dim).flip(0)),
            stable=True) for k in range(STEPS)], dim),
        ("iaf", "zuko"): zuko_iaf(dim),
        ("sylvester_householder", "ours"): ours(lambda: sylvester_flow(dim, STEPS, "householder", reflections=4)),
        ("sylvester_householder", "pyro"): pyro_flow(lambda: [T.Sylvester(dim, count_transforms=4)
                                                              for _ in range(STEPS)], dim),
        ("sylvester_orthogonal", "ours"): ours(lambda: sylvester_flow(dim, STEPS, "orthogonal",
                                                                      bottleneck=max(1, dim // 2))),
        ("sylvester_triangular", "ours"): ours(lambda: sylvester_flow(dim, STEPS, "triangular")),
    }
    if dim < 2:
        impls = {k: v for k, v in impls.items() if k[0] != "iaf"}
    return impls


def layer_rows(width=256):
    x = torch.randn(BATCH, width)
    impls = {"nn.Linear": nn.Linear(width, width), "BayesLinear(local reparam)": BayesLinear(width, width),
             "BayesLinear(sampled weights)": BayesLinear(width, width, local_reparam=False),
             "NoisyLinear(factorised)": NoisyLinear(width, width),
             "NoisyLinear(independent)": NoisyLinear(width, width, factorised=False),
             "MNFLinear(2 coupling steps)": MNFLinear(width, width)}

    def wrap(m):
        def run(backward):
            y = m(x)
            if backward:
                y.sum().backward()
        return run, m
    return {(name, "ours" if name != "nn.Linear" else "torch"): wrap(m) for name, m in impls.items()}


def measure(impls, reps, backward):
    times = {k: [] for k in impls}
    for k, (run, _) in impls.items():          # warm-up
        for _ in range(3):
            run(backward)
    for _ in range(reps):
        for k, (run, mod) in impls.items():
            mod.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            run(backward)
            times[k].append(time.perf_counter() - t0)
    return {k: (min(v) * 1e3, statistics.median(v) * 1e3) for k, v in times.items()}


def report(res):
    """Markdown tables from the results JSON (for docs/inference_vi_flows_layers.md)."""
    lines = ["| flow | D | ours fwd / fwd+bwd (ms, min) | Pyro | zuko | ratio to fastest peer (fwd / fwd+bwd) |",
             "|---|---|---|---|---|---|"]
    fmt = lambda e: f"{e['fwd_ms']:.2f} / {e['fwd_bwd_ms']:.2f}" if e else "-"  # noqa: E731
    for r in res["flows"]:
        ratio = (f"{r['ratio_fwd_ms_vs_fastest_peer']:.2f} / {r['ratio_fwd_bwd_ms_vs_fastest_peer']:.2f}"
                 if "ratio_fwd_ms_vs_fastest_peer" in r else "no peer")
        lines.append(f"| {r['flow']} | {r['dim']} | {fmt(r['ours'])} | {fmt(r.get('pyro'))} | {fmt(r.get('zuko'))} | {ratio} |")
    lines += ["", "| layer (256 -> 256, batch 256) | fwd+bwd (ms, min) | ratio to nn.Linear |", "|---|---|---|"]
    for r in res["layers"]["rows"]:
        lines.append(f"| {r['layer']} | {r['fwd_bwd_ms']:.2f} | {r['ratio_vs_nn_linear']:.2f} |")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", action="store_true", help="print markdown tables from the results JSON")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--dims", type=int, nargs="+", default=[2, 16, 64])
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    if args.report:
        report(json.load(open(args.out)))
        return
    torch.set_num_threads(1)
    torch.manual_seed(0)
    import pyro
    import zuko
    flows = []
    for dim in args.dims:
        impls = flow_rows(dim)
        fwd = measure(impls, args.reps, backward=False)
        both = measure(impls, args.reps, backward=True)
        for flow in dict.fromkeys(k[0] for k in impls):
            entries = {lib: {"fwd_ms": fwd[(f, lib)][0], "fwd_bwd_ms": both[(f, lib)][0],
                             "fwd_ms_median": fwd[(f, lib)][1], "fwd_bwd_ms_median": both[(f, lib)][1]}
                       for (f, lib) in impls if f == flow}
            peers = {lib: v for lib, v in entries.items() if lib != "ours"}
            row = {"flow": flow, "dim": dim, "batch": BATCH, "steps": STEPS, **{f"{lib}": v for lib, v in entries.items()}}
            if peers:
                for key in ("fwd_ms", "fwd_bwd_ms"):
                    best = min(v[key] for v in peers.values())
                    row[f"ratio_{key}_vs_fastest_peer"] = entries["ours"][key] / best
            flows.append(row)
            print(json.dumps(row), flush=True)
    layer_t = measure(layer_rows(), args.reps, backward=True)
    base = layer_t[("nn.Linear", "torch")][0]
    layers = [{"layer": k[0], "fwd_bwd_ms": v[0], "fwd_bwd_ms_median": v[1], "ratio_vs_nn_linear": v[0] / base}
              for k, v in layer_t.items()]
    for r in layers:
        print(json.dumps(r), flush=True)
    out = {"command": "python benchmarks/flows_speed.py " + " ".join(sys.argv[1:]),
           "environment": {"torch": torch.__version__, "zuko": zuko.__version__, "pyro": pyro.__version__,
                           "python": platform.python_version(), "machine": platform.machine(), "threads": 1,
                           "note": "shared 2-core CPU; interleaved repetitions; *_ms = minimum, *_median = median"},
           "reps": args.reps, "flows": flows, "layers": {"width": 256, "batch": BATCH, "rows": layers}}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".tmp", "w") as fh:
        json.dump(out, fh, indent=1)
    os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()

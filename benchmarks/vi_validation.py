"""Validation of inference.vi / inference.flows / inference.layers (issue #4, validations 1-5).

    python benchmarks/vi_validation.py --parts vr2d flows bbb bnn vae [--seeds 3] [--epochs 150]

Parts (each merges its section into benchmarks/results/variational_validation.json):
  vae   1. VAE on statically binarised 8x8 digits (sklearn load_digits): test -ELBO and IS-NLL of plain,
           planar, IAF and O/H/T-Sylvester posteriors, several seeds (seed 000 Table 5.1 ordering).
  vr2d  2. Monte Carlo VR bound for p = N(0, I), q = N([1, 1], I) in 2-D (exact value -alpha).
  bnn   3. BNN regression on sklearn's diabetes data, VR alpha in {1, 0.5, 0}, 5 random 90/10 splits
           (seed 001 Tables 4.2-4.3 protocol, scaled down).
  flows 4. Flow log-dets vs autograd Jacobians; Sylvester invertibility condition; Bjorck convergence.
  bbb   5. BBB hand gradients vs autograd; local reparameterisation vs sampled weights (KS test);
           Bayesian linear regression recovers the exact (mean-field) posterior.
Scale: CPU-sized (see each section's "config"); the seeds' experiments are MNIST / UCI on GPUs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from inference.flows import Flow, DiagNormal, iaf_flow, planar_flow, sylvester_flow, bjorck_orthonormalise  # noqa: E402
from inference.layers import BayesLinear, GaussianPrior, ScaleMixturePrior  # noqa: E402
from inference.vi import vr_bound  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "variational_validation.json")


# ------------------------------------------------------------------ 2. VR bound in 2-D
def part_vr2d(args):
    g = torch.Generator().manual_seed(0)
    reps = 2000
    alphas = [-1.0, 0.0, 0.5, 2.0]
    Ks = [1, 2, 5, 10, 50, 200, 1000]
    rows = []
    for alpha in alphas:
        for K in Ks:
            z = 1.0 + torch.randn(K, reps, 2, generator=g, dtype=torch.float64)
            log_w = -0.5 * (z ** 2).sum(-1) + 0.5 * ((z - 1.0) ** 2).sum(-1)      # log p - log q
            est = vr_bound(log_w, alpha)
            rows.append({"alpha": alpha, "K": K, "mean": est.mean().item(),
                         "se": (est.std() / math.sqrt(reps)).item(), "exact": -alpha})
    checks = {}
    for alpha in alphas:
        r = [x for x in rows if x["alpha"] == alpha]
        checks[f"alpha={alpha}"] = {
            "K=1 within 3se of -1": abs(r[0]["mean"] + 1) < 3 * r[0]["se"],
            "monotone towards -alpha": all((b["mean"] - a["mean"]) * (-alpha + 1) >= -3 * (a["se"] + b["se"])
                                           for a, b in zip(r, r[1:])) if alpha != 1 else True,
            "K=1000 gap to -alpha": r[-1]["mean"] + alpha,
        }
    return {"config": {"reps": reps, "p": "N(0, I2)", "q": "N([1,1], I2)"}, "rows": rows, "checks": checks}


# ------------------------------------------------------------------ 4. flows
def _flow_errors(flow, d, n=5, context=None):
    """Max |analytic - autograd| log|det J| over every step of the flow at n random points (per step, since
    the product Jacobian of saturated steps is too ill-conditioned for slogdet), max |log_prob(z_K) -
    (log q0(z0) - sum of autograd log-dets)|, and the max inverse round-trip error of a fresh tensor."""
    dist = flow(context)
    step_errs, lp_errs, inv_errs = [], [], []
    for _ in range(n):
        z0 = torch.randn((1, d) if context is not None else (d,), dtype=torch.float64)
        z, total = z0, 0.0
        for t in dist.transforms:
            y = t(z)
            jac = torch.autograd.functional.jacobian(lambda v: t(v.reshape(z.shape)).reshape(-1), z.reshape(-1))
            auto = torch.linalg.slogdet(jac)[1]
            step_errs.append((t.log_abs_det_jacobian(z, y) - auto).abs().max().item())
            total = total + auto
            z = y
        lp_errs.append((dist.log_prob(z) - (dist.base_dist.log_prob(z0) - total)).abs().max().item())
        x = z.clone()
        for t in reversed(dist.transforms):
            x = t.inv(x)
        inv_errs.append((x - z0).abs().max().item())
    return max(step_errs), max(lp_errs), max(inv_errs)


def part_flows(args):
    torch.set_default_dtype(torch.float64)
    out = {"perturbation": "all flow parameters += 0.3 N(0,1) (away from the near-identity init)",
           "logdet_vs_autograd_max_abs_err": {}, "log_prob_vs_autograd_max_abs_err": {},
           "inverse_round_trip_max_abs_err": {}, "bjorck": [],
           "sylvester_condition": {}}
    makers = {"planar": lambda d, c: planar_flow(d, 4, c), "iaf": lambda d, c: iaf_flow(d, 4, c, hidden=32),
              "o_snf": lambda d, c: sylvester_flow(d, 4, "orthogonal", c),
              "h_snf": lambda d, c: sylvester_flow(d, 4, "householder", c),
              "t_snf": lambda d, c: sylvester_flow(d, 4, "triangular", c)}
    from inference.flows import radial_flow
    makers["radial"] = lambda d, c: radial_flow(d, 4, c)
    for name, make in makers.items():
        for d in (2, 8):
            for ctx in (0, 5):
                torch.manual_seed(0)
                flow = make(d, ctx)
                with torch.no_grad():
                    for n, p in flow.named_parameters():
                        if "base" not in n:
                            p.add_(0.3 * torch.randn_like(p))
                c = torch.randn(1, ctx) if ctx else None
                key = f"{name}_d{d}_ctx{ctx}"
                (out["logdet_vs_autograd_max_abs_err"][key], out["log_prob_vs_autograd_max_abs_err"][key],
                 out["inverse_round_trip_max_abs_err"][key]) = _flow_errors(flow, d, context=c)
    for D, M in [(16, 8), (64, 32), (64, 64)]:
        torch.manual_seed(0)
        q, iters, res = bjorck_orthonormalise(torch.randn(256, D, M), 30, 1e-6)
        out["bjorck"].append({"D": D, "M": M, "batch": 256, "iterations": iters, "residual_fro": res})
    from inference.flows import OrthogonalSylvester
    step = OrthogonalSylvester(8, 4)
    with torch.no_grad():
        step.params["r"].copy_(torch.diag(torch.tensor([30.0, -30.0, 5.0, -5.0])))
        step.params["r_tilde"].copy_(torch.diag(torch.tensor([-30.0, 30.0, 5.0, -5.0])))
    t = step()
    x = 3 * torch.randn(1000, 8)
    y = t(x)
    out["sylvester_condition"] = {
        "raw diagonals": "r = diag(30,-30,5,-5), r~ = diag(-30,30,5,-5)",
        "min r_mm r~_mm": t.diag_prod.min().item(), "max r_mm r~_mm": t.diag_prod.max().item(),
        "all log-dets finite": bool(torch.isfinite(t.log_abs_det_jacobian(x, y)).all()),
        "inverse max abs err": (t.inv(y.clone()) - x).abs().max().item()}
    torch.set_default_dtype(torch.float32)
    return out


# ------------------------------------------------------------------ 5. BBB
def part_bbb(args):
    from scipy import stats
    torch.set_default_dtype(torch.float64)
    res = {}
    # (a) hand gradients (Proposition 1) vs autograd
    torch.manual_seed(0)
    layer = BayesLinear(5, 3, prior=ScaleMixturePrior(0.5, 1.0, math.exp(-6)), local_reparam=False, bias=False)
    x, y = torch.randn(20, 5), torch.randn(20, 3)
    prior = layer.prior()
    errs = []
    for _ in range(20):
        eps = torch.randn(3, 5)

        def f(w, mu, rho):
            q = torch.distributions.Normal(mu, F.softplus(rho))
            return (q.log_prob(w) - prior.log_prob(w)).sum() + 0.5 * ((x @ w.T - y) ** 2).sum()
        mu, rho = layer.weight_mu, layer.weight_rho
        g_mu, g_rho = torch.autograd.grad(f(mu + F.softplus(rho) * eps, mu, rho), (mu, rho))
        wl = (mu + F.softplus(rho) * eps).detach().requires_grad_()
        ml, rl = mu.detach().requires_grad_(), rho.detach().requires_grad_()
        dw, dmu, drho = torch.autograd.grad(f(wl, ml, rl), (wl, ml, rl))
        errs.append(max((g_mu - dw - dmu).abs().max().item(),
                        (g_rho - dw * eps / (1 + torch.exp(-rho.detach())) - drho).abs().max().item()))
    res["hand_vs_autograd_max_abs_err"] = max(errs)
    # (b) local reparameterisation vs sampled weights
    layer = BayesLinear(6, 4)
    with torch.no_grad():
        layer.weight_rho.fill_(-1.0)
        layer.bias_rho.fill_(-1.5)
    xi = torch.randn(1, 6).expand(20000, 6)
    local = layer(xi).detach()
    sampled = BayesLinear.forward_sampled(xi[:1], layer.sample_weights(20000)).squeeze(1).detach()
    res["local_reparam_ks_pvalues"] = [stats.ks_2samp(local[:, j].numpy(), sampled[:, j].numpy()).pvalue
                                       for j in range(4)]
    # (c) Bayesian linear regression: VI with BayesLinear vs the exact posterior
    rows = []
    for design in ("orthogonal", "correlated"):
        g = torch.Generator().manual_seed(1)
        n, d, s = 100, 3, 0.5
        X = torch.randn(n, d, generator=g)
        if design == "orthogonal":
            X = torch.linalg.qr(X)[0] * math.sqrt(n / 5)
        else:
            X[:, 1] = 0.8 * X[:, 0] + 0.6 * X[:, 1]
        y = X @ torch.tensor([1.0, -0.5, 0.25]) + s * torch.randn(n, generator=g)
        Lam = torch.eye(d) + X.T @ X / s ** 2
        mean = torch.linalg.solve(Lam, X.T @ y / s ** 2)
        marg_std = torch.linalg.inv(Lam).diagonal().sqrt()
        mf_std = Lam.diagonal().rsqrt()                     # mean-field optimum: lambda_i = Lambda_ii
        torch.manual_seed(0)
        layer = BayesLinear(d, 1, prior=GaussianPrior(1.0), bias=False, init_sigma=0.1)
        opt = torch.optim.Adam(layer.parameters(), lr=0.01)
        sched = torch.optim.lr_scheduler.StepLR(opt, 1000, 0.3)
        for _ in range(4000):
            opt.zero_grad()
            out = layer(X.unsqueeze(0).expand(32, n, d)).squeeze(-1)
            (0.5 * ((out - y) ** 2).sum(-1).mean() / s ** 2 + layer.kl()).backward()
            opt.step()
            sched.step()
        q_mu, q_std = layer.weight_mu.detach()[0], F.softplus(layer.weight_rho.detach()[0])
        rows.append({"design": design, "exact_mean": mean.tolist(), "vi_mean": q_mu.tolist(),
                     "exact_marginal_std": marg_std.tolist(), "mean_field_optimum_std": mf_std.tolist(),
                     "vi_std": q_std.tolist(),
                     "max_abs_mean_err": (q_mu - mean).abs().max().item(),
                     "max_rel_std_err_vs_mf_optimum": ((q_std - mf_std).abs() / mf_std).max().item()})
    res["bayesian_linear_regression"] = rows
    torch.set_default_dtype(torch.float32)
    return res


# ------------------------------------------------------------------ 3. BNN on diabetes
class BNN(nn.Module):
    def __init__(self, d, hidden=50):
        super().__init__()
        self.l1, self.l2 = BayesLinear(d, hidden, init_sigma=1e-2), BayesLinear(hidden, 1, init_sigma=1e-2)
        self.log_noise = nn.Parameter(torch.tensor(math.log(0.5)))

    def sample(self, x, K):
        w1, w2 = self.l1.sample_weights(K), self.l2.sample_weights(K)
        f = BayesLinear.forward_sampled(torch.relu(BayesLinear.forward_sampled(x, w1)), w2).squeeze(-1)
        return f, self.l1.log_ratio(w1) + self.l2.log_ratio(w2)          # [K, B], [K]


def part_bnn(args):
    from sklearn.datasets import load_diabetes
    X, Y = load_diabetes(return_X_y=True)
    X, Y = torch.tensor(X, dtype=torch.float32), torch.tensor(Y, dtype=torch.float32)
    alphas = [1.0, 0.5, 0.0]
    cfg = {"hidden": 50, "K": args.bnn_k, "batch": 32, "epochs": args.bnn_epochs, "lr": 1e-3, "splits": args.splits,
           "test_samples": 200, "prior": "N(0, 1)", "noise": "learned homoscedastic"}
    rows = []
    for split in range(args.splits):
        perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(100 + split))
        n_tr = int(0.9 * len(X))
        tr, te = perm[:n_tr], perm[n_tr:]
        xm, xs = X[tr].mean(0), X[tr].std(0)
        ym, ys = Y[tr].mean(), Y[tr].std()
        xtr, xte = (X[tr] - xm) / xs, (X[te] - xm) / xs
        ytr, yte = (Y[tr] - ym) / ys, Y[te]
        for alpha in alphas:
            torch.manual_seed(split)
            net = BNN(X.shape[1])
            opt = torch.optim.Adam(net.parameters(), lr=cfg["lr"])
            N = n_tr
            t0 = time.time()
            for epoch in range(cfg["epochs"]):
                order = torch.randperm(N)
                for i in range(0, N, cfg["batch"]):
                    idx = order[i:i + cfg["batch"]]
                    f, log_ratio = net.sample(xtr[idx], cfg["K"])
                    ll = torch.distributions.Normal(f, net.log_noise.exp()).log_prob(ytr[idx]).sum(-1)
                    log_w = (N / len(idx)) * ll - log_ratio               # energy approximation (4.7)
                    loss = -vr_bound(log_w, alpha) / N
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            with torch.no_grad():
                f, _ = net.sample(xte, cfg["test_samples"])
                f = f * ys + ym
                noise = net.log_noise.exp() * ys
                lp = torch.distributions.Normal(f, noise).log_prob(yte)
                test_ll = (torch.logsumexp(lp, 0) - math.log(f.shape[0])).mean().item()
                rmse = ((f.mean(0) - yte) ** 2).mean().sqrt().item()
            rows.append({"split": split, "alpha": alpha, "test_ll": test_ll, "rmse": rmse,
                         "seconds": time.time() - t0})
            print(f"bnn split {split} alpha {alpha}: test LL {test_ll:.3f} RMSE {rmse:.2f}", flush=True)
    summary = {}
    for alpha in alphas:
        ll = np.array([r["test_ll"] for r in rows if r["alpha"] == alpha])
        rm = np.array([r["rmse"] for r in rows if r["alpha"] == alpha])
        summary[str(alpha)] = {"test_ll_mean": ll.mean(), "test_ll_se": ll.std(ddof=1) / math.sqrt(len(ll)),
                               "rmse_mean": rm.mean(), "rmse_se": rm.std(ddof=1) / math.sqrt(len(rm))}
    return {"config": cfg, "rows": rows, "summary": summary}


# ------------------------------------------------------------------ 1. VAE on binarised digits
class VAE(nn.Module):
    def __init__(self, kind, latent=16, hidden=128, steps=4):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(64, hidden), nn.ELU(), nn.Linear(hidden, hidden), nn.ELU())
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ELU(), nn.Linear(hidden, hidden), nn.ELU(),
                                     nn.Linear(hidden, 64))
        c = hidden
        if kind == "plain":
            self.q = Flow([], DiagNormal(latent, c))
        elif kind == "planar":
            self.q = planar_flow(latent, steps, c)
        elif kind == "iaf":
            self.q = iaf_flow(latent, steps, c, hidden=64)
        elif kind == "o_snf":
            self.q = sylvester_flow(latent, steps, "orthogonal", c, bottleneck=latent // 2)
        elif kind == "h_snf":
            self.q = sylvester_flow(latent, steps, "householder", c, reflections=4)
        elif kind == "t_snf":
            self.q = sylvester_flow(latent, steps, "triangular", c)
        self.latent = latent

    def log_weights(self, x, K=1, beta=1.0):
        """[K, B] terms log p(x|z) + beta (log p(z) - log q(z|x)) with z ~ q(z|x)."""
        q = self.q(self.encoder(x))
        z = q.rsample((K,))
        log_q = q.log_prob(z)
        log_pz = torch.distributions.Normal(0.0, 1.0).log_prob(z).sum(-1)
        logits = self.decoder(z)
        log_px = -F.binary_cross_entropy_with_logits(logits, x.expand_as(logits), reduction="none").sum(-1)
        return log_px + beta * (log_pz - log_q)


def part_vae(args):
    from sklearn.datasets import load_digits
    X = torch.tensor(load_digits().data / 16.0 > 0.5, dtype=torch.float32)    # static binarisation
    perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(0))
    xtr, xte = X[perm[:1497]], X[perm[1497:]]
    cfg = {"data": "sklearn load_digits, 8x8 -> 64 binary pixels (> 8/16), 1497 train / 300 test",
           "latent": 16, "hidden": 128, "flow_steps": 4, "o_snf_M": 8, "h_snf_H": 4, "iaf_width": 64,
           "epochs": args.epochs, "batch": 100, "lr": 1e-3, "kl_warmup_epochs": args.epochs // 4,
           "test_elbo_samples": 10, "nll_importance_samples": 1000, "seeds": args.seeds}
    rows = []
    for kind in args.models:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            torch.manual_seed(seed)
            model = VAE(kind)
            opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
            t0 = time.time()
            for epoch in range(cfg["epochs"]):
                beta = min(1.0, (epoch + 1) / max(1, cfg["kl_warmup_epochs"]))
                order = torch.randperm(len(xtr))
                for i in range(0, len(xtr), cfg["batch"]):
                    loss = -model.log_weights(xtr[order[i:i + cfg["batch"]]], 1, beta).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            with torch.no_grad():
                test_elbo = model.log_weights(xte, cfg["test_elbo_samples"]).mean().item()
                nll = -torch.cat([vr_bound(model.log_weights(xte[i:i + 50], cfg["nll_importance_samples"]), 0.0)
                                  for i in range(0, len(xte), 50)]).mean().item()
                train_elbo = model.log_weights(xtr, 1).mean().item()
            rows.append({"model": kind, "seed": seed, "test_neg_elbo": -test_elbo, "test_nll_is": nll,
                         "train_neg_elbo": -train_elbo, "seconds": time.time() - t0})
            print(f"vae {kind} seed {seed}: test -ELBO {-test_elbo:.2f} NLL {nll:.2f} ({time.time() - t0:.0f}s)",
                  flush=True)
    return {"config": cfg, "rows": rows}


def summarise_vae(section):
    summary = {}
    for kind in dict.fromkeys(r["model"] for r in section["rows"]):
        v = np.array([r["test_neg_elbo"] for r in section["rows"] if r["model"] == kind])
        n = np.array([r["test_nll_is"] for r in section["rows"] if r["model"] == kind])
        summary[kind] = {"test_neg_elbo_mean": v.mean(), "test_neg_elbo_se": v.std(ddof=1) / math.sqrt(len(v)) if len(v) > 1 else None,
                         "test_nll_mean": n.mean(), "n_seeds": len(v)}
    order = sorted(summary, key=lambda k: summary[k]["test_neg_elbo_mean"])
    seed_claim = ["o_snf", "iaf", "planar", "plain"]
    ranks = [order.index(k) for k in seed_claim if k in order]
    section["summary"] = summary
    section["ranking_best_to_worst"] = order
    section["seed000_ordering_sylvester<iaf<planar<plain_holds"] = ranks == sorted(ranks) and len(ranks) == 4
    return section


def report(results, img_dir):
    """Markdown tables (for docs/inference_vi_flows_layers.md) and the VR plot, from the results JSON."""
    lines = []
    if "vae" in results:
        v = results["vae"]
        lines += ["| posterior | test -ELBO (nats) | test NLL (IS, nats) | seeds |", "|---|---|---|---|"]
        for k in v["ranking_best_to_worst"]:
            s = v["summary"][k]
            se = f" ± {s['test_neg_elbo_se']:.2f}" if s["test_neg_elbo_se"] is not None else ""
            lines.append(f"| {k} | {s['test_neg_elbo_mean']:.2f}{se} | {s['test_nll_mean']:.2f} | {s['n_seeds']} |")
        lines += ["", f"Seed-000 ordering (Sylvester < IAF < planar < plain) holds: "
                      f"{v['seed000_ordering_sylvester<iaf<planar<plain_holds']}", ""]
    if "vr2d" in results:
        rows = results["vr2d"]["rows"]
        Ks = sorted({r["K"] for r in rows})
        lines += ["| alpha | exact | " + " | ".join(f"K={k}" for k in Ks) + " |", "|---" * (len(Ks) + 2) + "|"]
        for a in sorted({r["alpha"] for r in rows}):
            vals = [next(r for r in rows if r["alpha"] == a and r["K"] == k) for k in Ks]
            lines.append(f"| {a:g} | {0.0 - a:g} | " + " | ".join(f"{r['mean']:.3f} ± {r['se']:.3f}" for r in vals) + " |")
        lines.append("")
    if "bnn" in results:
        rows = results["bnn"]["rows"]
        lines += ["| alpha | test log-lik | RMSE | paired LL difference to alpha=1 |", "|---|---|---|---|"]
        base = {r["split"]: r["test_ll"] for r in rows if r["alpha"] == 1.0}
        for a, s in results["bnn"]["summary"].items():
            d = np.array([r["test_ll"] - base[r["split"]] for r in rows if r["alpha"] == float(a)])
            diff = "-" if float(a) == 1.0 else f"{d.mean():+.3f} ± {d.std(ddof=1) / math.sqrt(len(d)):.3f}"
            lines.append(f"| {a} | {s['test_ll_mean']:.3f} ± {s['test_ll_se']:.3f} | "
                         f"{s['rmse_mean']:.2f} ± {s['rmse_se']:.2f} | {diff} |")
        lines.append("")
    if "flows" in results and "bbb" in results:
        f, b = results["flows"], results["bbb"]
        by_flow = lambda d, name: max(v for k, v in d.items() if k.startswith(name + "_"))  # noqa: E731
        lines += ["| check | result |", "|---|---|"]
        for name in ["planar", "radial", "iaf", "o_snf", "h_snf", "t_snf"]:
            lines.append(f"| {name}: max abs(log-det - autograd slogdet) per step, D in {{2, 8}}, with/without "
                         f"context | {by_flow(f['logdet_vs_autograd_max_abs_err'], name):.1e} "
                         f"(inverse round trip {by_flow(f['inverse_round_trip_max_abs_err'], name):.1e}) |")
        c = f["sylvester_condition"]
        lines.append(f"| Sylvester condition with raw diagonals {c['raw diagonals']} | r r~ in "
                     f"[{c['min r_mm r~_mm']:.7f}, {c['max r_mm r~_mm']:.4f}], log-dets finite: "
                     f"{c['all log-dets finite']}, inverse error {c['inverse max abs err']:.1e} |")
        for r in f["bjorck"]:
            lines.append(f"| Björck, Q^(0) ~ N(0,1)^(D x M) / Frobenius norm, D={r['D']}, M={r['M']}, batch {r['batch']} | "
                         f"{r['iterations']} iterations, max residual ‖QᵀQ − I‖_F = {r['residual_fro']:.1e} |")
        lines.append(f"| BBB hand gradients (Prop. 1, softplus) vs autograd | max abs err "
                     f"{b['hand_vs_autograd_max_abs_err']:.1e} |")
        lines.append("| local reparameterisation vs sampled weights (KS test, 20000 draws, 4 units) | p-values "
                     + ", ".join(f"{p:.2f}" for p in b["local_reparam_ks_pvalues"]) + " |")
        for r in b["bayesian_linear_regression"]:
            lines.append(f"| Bayesian linear regression ({r['design']} design): VI mean / std vs exact | "
                         f"max mean err {r['max_abs_mean_err']:.1e}; std rel. err to the mean-field optimum "
                         f"{r['max_rel_std_err_vs_mf_optimum']:.1e}; exact marginal std "
                         f"{', '.join(f'{x:.3f}' for x in r['exact_marginal_std'])}, VI std "
                         f"{', '.join(f'{x:.3f}' for x in r['vi_std'])} |")
        lines.append("")
    print("\n".join(lines))
    if "vr2d" in results and img_dir:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        rows = results["vr2d"]["rows"]
        fig, ax = plt.subplots(figsize=(5, 3.5))
        for a in sorted({r["alpha"] for r in rows}):
            rr = [r for r in rows if r["alpha"] == a]
            ax.errorbar([r["K"] for r in rr], [r["mean"] for r in rr], yerr=[2 * r["se"] for r in rr],
                        marker="o", ms=3, label=f"alpha={a}")
            ax.axhline(-a, ls=":", c="gray", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("K")
        ax.set_ylabel("E[MC VR bound]")
        ax.set_title("p=N(0,I), q=N([1,1],I): exact -alpha (dotted)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        os.makedirs(img_dir, exist_ok=True)
        fig.savefig(os.path.join(img_dir, "vi_vr2d.png"), dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", action="store_true", help="print markdown tables and write docs/img/vi_vr2d.png")
    ap.add_argument("--parts", nargs="+", default=["vr2d", "flows", "bbb", "bnn", "vae"],
                    choices=["vr2d", "flows", "bbb", "bnn", "vae"])
    ap.add_argument("--models", nargs="+", default=["plain", "planar", "iaf", "o_snf", "h_snf", "t_snf"])
    ap.add_argument("--seeds", type=int, default=3, help="number of seeds (VAE)")
    ap.add_argument("--first-seed", type=int, default=0, help="first VAE seed (split long runs)")
    ap.add_argument("--epochs", type=int, default=150)
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("--bnn-epochs", type=int, default=300)
    ap.add_argument("--bnn-k", type=int, default=20)
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = json.load(open(args.out)) if os.path.exists(args.out) else {}
    if args.report:
        report(results, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "img"))
        return
    fns = {"vr2d": part_vr2d, "flows": part_flows, "bbb": part_bbb, "bnn": part_bnn, "vae": part_vae}
    for part in args.parts:
        t0 = time.time()
        section = fns[part](args)
        if part == "vae":      # merge (model, seed) rows run in separate invocations
            new = {(r["model"], r["seed"]) for r in section["rows"]}
            old = results.get("vae", {}).get("rows", [])
            section["rows"] = [r for r in old if (r["model"], r["seed"]) not in new] + section["rows"]
            section["config"]["seeds"] = len({r["seed"] for r in section["rows"]})
            section = summarise_vae(section)
        section["wall_seconds"] = time.time() - t0
        section["command"] = "python benchmarks/vi_validation.py " + " ".join(sys.argv[1:])
        results[part] = section
        results["environment"] = {"torch": torch.__version__, "python": platform.python_version(),
                                  "machine": platform.machine(), "threads": 1}
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(results, fh, indent=1, default=float)
        os.replace(tmp, args.out)
        print(f"[{part}] done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()

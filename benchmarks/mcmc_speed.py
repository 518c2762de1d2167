"""Throughput of the batched HMC / relativistic HMC kernels against NumPyro and Pyro, in one process run.

    nice -n 15 python benchmarks/mcmc_speed.py [--quick] [--targets ...] [--device cpu|cuda]

Targets of different character: a 100-d Gaussian with scales 0.5..1.5 (``gauss100``), an ill-conditioned 50-d
Gaussian with scales 0.1..10 (``illcond_gauss50``, identity mass), Neal's 10-d funnel (``funnel10``), the
breast-cancer logistic-regression posterior (d = 31, N = 569) and a synthetic logistic regression with N = 2 000,
d = 20 (``logreg2000``). Every sampler uses the same fixed step size and number of leapfrog steps (no adaptation
while timing), the same float64 precision, and starts from the same positions (exact draws for the Gaussians and the
funnel; the end of a short warm-up for the regressions). Reported per run: wall time of the sampling loop, gradient
evaluations per second (chains x leapfrog steps x draws / time), and ESS/s = min over coordinates of the bulk ESS
(all chains pooled, ArviZ-equivalent estimator) / time. Ours: eager (``hmc.step``) and compiled
(``hmc.build(compile=True)``: one ``torch.compile``d graph per transition), whose first, compiling step is timed
separately (``first_step_seconds_incl_compile``). At 1 000 chains (and on CUDA) also multinomial NUTS at the same
step size (max tree depth 10), compiled (``nuts.build(compile=True)``), against NumPyro's NUTS; its
gradient evaluations per second count the chains' own leapfrog steps (as Stan counts them), not the work done
(``evaluated_grad_evals_per_draw``: per chain, with the lock-step steps inside subtrees and the padding). Peers:
* NumPyro (JAX on CPU, one thread via XLA flags; with ``--device cuda`` JAX on the same GPU): its functional HMC kernel with ``potential_fn``, vmapped over
  chains and scanned over draws under one ``jax.jit``; compiled by a first call, the second call is timed.
* Pyro (two targets): HMC with ``potential_fn``, one chain (Pyro's HMC kernel does not vectorise chains, so its ESS/s
  with N chains run one after another equals its one-chain ESS/s).
Ratios are ours / peer at the same number of chains (Pyro: its one-chain rate). ``summary[target][chains][hmc|nuts]``
holds, at 1 000 chains (10 000 with ``--device cuda``), ``ours`` (compiled) and ``numpyro`` with ``ess_per_s`` and
compile seconds, and ``ratio_ess_per_s``. Writes benchmarks/results/mcmc_speed.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.runs import write_json  # noqa: E402
from inference import diagnostics, targets  # noqa: E402
from inference.mcmc import adaptation, hmc, kinetic, nuts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gen(seed, device="cpu"):
    return torch.Generator(device=device).manual_seed(seed)


TARGETS = ("gauss100", "breast_cancer", "illcond_gauss50", "funnel10", "logreg2000")
# spot checks on targets the sampler was never developed on (not run by default): the non-centred eight-schools
# hierarchy (d = 10) and a 200-d Gaussian with a dense random precision matrix
SPOT_CHECKS = ("eight_schools", "dense_gauss200")
SCHOOLS_Y = (28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0)
SCHOOLS_SIGMA = (15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0)


def dense_precision():
    a = torch.randn(200, 200, dtype=torch.float64, generator=gen(5))
    return a @ a.T / 200 + torch.eye(200, dtype=torch.float64)
EXACT = ("gauss100", "illcond_gauss50", "funnel10")          # exact draws start the chains


def problem(name):
    if name == "gauss100":
        scales = torch.linspace(0.5, 1.5, 100, dtype=torch.float64)
        t = targets.gaussian(100, scales, name="gauss100")
        return t, {"step_size": 0.15, "num_steps": 10}, scales
    if name == "illcond_gauss50":       # scales 0.1 .. 10: variances spanning 10^4, identity mass
        scales = torch.logspace(-1, 1, 50, dtype=torch.float64)
        return targets.gaussian(50, scales, name="illcond_gauss50"), {"step_size": 0.08, "num_steps": 10}, scales
    if name == "funnel10":
        t = targets.funnel(10)
        t.name = name
        return t, {"step_size": 0.1, "num_steps": 10}, None
    if name == "eight_schools":      # (mu, log tau, theta~_1..8); mu ~ N(0, 5^2), tau ~ half-Cauchy(5)
        y, sigma = torch.tensor(SCHOOLS_Y, dtype=torch.float64), torch.tensor(SCHOOLS_SIGMA, dtype=torch.float64)

        def schools(x):
            mu, log_tau, z = x[..., 0], x[..., 1], x[..., 2:]
            tau = torch.exp(log_tau)
            prior = -0.5 * (mu / 5) ** 2 - torch.log1p((tau / 5) ** 2) + log_tau - 0.5 * (z * z).sum(-1)
            mean = mu.unsqueeze(-1) + tau.unsqueeze(-1) * z
            return prior - 0.5 * (((y.to(x) - mean) / sigma.to(x)) ** 2).sum(-1)
        return targets.Target(name, 10, schools), None, None
    if name == "dense_gauss200":
        precision = dense_precision()
        return targets.Target(name, 200, lambda x: -0.5 * ((x @ precision.to(x)) * x).sum(-1)), None, None
    if name == "logreg2000":
        t = targets.logistic_regression_synthetic(num_data=2000, dim=20, seed=0)
        t.name = name
        return t, None, None
    t = targets.breast_cancer()
    return t, None, None


def warm_start(t, cfg, chains, device):
    if t.name in EXACT:
        return t.sample(chains, gen(1)).to(device), cfg
    # short warm-up on 8 chains to find a step size and a typical-set start; shared by all samplers
    res = adaptation.window_adaptation(t.log_prob, torch.zeros(8, t.dim, dtype=torch.float64), gen(2), 300,
                                       num_steps=10, adapt_mass=False, initial_step_size=0.01)
    cfg = {"step_size": round(res.step_size, 5), "num_steps": 10}
    idx = torch.arange(chains) % 8
    return res.state.position[idx].to(device), cfg


def ess_min(draws):
    return diagnostics.ess_bulk(draws.cpu()).min().item()


def timed(kernel, x0, draws, device, warmup=1):
    """(seconds of the timed sampling loop, draws, info, seconds of the first (compiling) ``warmup`` steps)."""
    state = kernel.init(x0)
    g = gen(3, device)
    t0 = time.perf_counter()
    warm = state
    for _ in range(warmup):                                    # compiles (compile=True); warms the allocator
        warm, _ = kernel.step(warm, g)
    if device == "cuda":
        torch.cuda.synchronize()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, x, info = hmc.sample(kernel.step, state, draws, g)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, x, info, first


def ours(t, x0, cfg, draws, relativistic, device, compile=False):
    """(seconds of the timed sampling loop, draws, acceptance, seconds of the first (compiling) step)."""
    kin = kinetic.RelativisticKinetic(1.0, 1.0 / cfg["step_size"]) if relativistic else None
    kernel = hmc.build(t.log_prob, cfg["step_size"], cfg["num_steps"], kinetic=kin, compile=compile)
    sec, x, info, first = timed(kernel, x0, draws, device)     # the log density's constants follow x0's device
    return sec, x, info["acceptance_rate"].mean().item(), first


NUTS_MAX_DEPTH = 10
NUTS_DRAWS = 100
NUTS_WARMUP = 5


def ours_nuts(t, x0, cfg, draws, device):
    """Compiled NUTS at the HMC step size, no adaptation while timing: (seconds, draws, info, seconds of the first
    steps)."""
    kernel = nuts.build(t.log_prob, cfg["step_size"], max_depth=NUTS_MAX_DEPTH, compile=True)
    # compiled NUTS has two graph sets (all chains; the chains still going), so a few draws to compile both
    return timed(kernel, x0, draws, device, warmup=NUTS_WARMUP)


def numpyro_run(t, x0, cfg, draws, algo="HMC"):
    import jax
    import jax.numpy as jnp
    import numpyro
    from numpyro.infer.hmc import hmc as hmc_kernel

    numpyro.enable_x64()
    jax.config.update("jax_enable_x64", True)
    if t.name in ("gauss100", "illcond_gauss50"):
        inv_var = jnp.asarray((1.0 / problem(t.name)[2] ** 2).numpy())

        def potential(x):
            return 0.5 * jnp.sum(x * x * inv_var)
    elif t.name == "eight_schools":
        y, sigma = jnp.asarray(SCHOOLS_Y), jnp.asarray(SCHOOLS_SIGMA)

        def potential(x):
            mu, log_tau, z = x[0], x[1], x[2:]
            tau = jnp.exp(log_tau)
            prior = -0.5 * (mu / 5) ** 2 - jnp.log1p((tau / 5) ** 2) + log_tau - 0.5 * jnp.sum(z * z)
            return -(prior - 0.5 * jnp.sum(((y - mu - tau * z) / sigma) ** 2))
    elif t.name == "dense_gauss200":
        precision = jnp.asarray(dense_precision().numpy())

        def potential(x):
            return 0.5 * x @ precision @ x
    elif t.name == "funnel10":
        def potential(x):          # targets.funnel(10, v_scale=3) up to a constant
            v, rest = x[0], x[1:]
            return 0.5 * (v / 3.0) ** 2 + 0.5 * jnp.sum(rest * rest) * jnp.exp(-v) + 0.5 * rest.shape[0] * v
    else:
        xs, ys = jnp.asarray(t.features.numpy()), jnp.asarray(t.labels.numpy())

        def potential(th):
            logits = xs @ th
            return jnp.sum(jax.nn.softplus(-logits) * ys + jax.nn.softplus(logits) * (1 - ys)) \
                + 0.5 * jnp.sum(th * th) / t.prior_var

    chains = x0.shape[0]
    # NumPyro's functional HMC kernel, vmapped over chains and scanned over draws, compiled by a first call.
    # With a fixed ``num_steps`` NumPyro 0.22 returned wrong draws here (mean 0.47, variance 0.76-1.22 on
    # N(0, I_4) over 3 x 2000 draws); a trajectory length just under eps * L gives exactly L steps and
    # correct draws, so that is what we pass (the step count is checked below).
    init_kernel, sample_kernel = hmc_kernel(potential_fn=potential, algo=algo)
    length = {"trajectory_length": cfg["step_size"] * cfg["num_steps"] * (1 - 1e-6)} if algo == "HMC" else \
        {"max_tree_depth": NUTS_MAX_DEPTH}

    def one_chain(z0, key):
        st = init_kernel(z0, num_warmup=0, step_size=cfg["step_size"], adapt_step_size=False,
                         adapt_mass_matrix=False, rng_key=key, **length)

        def body(st, _):
            st = sample_kernel(st)
            return st, (st.z, st.num_steps)

        return jax.lax.scan(body, st, None, length=draws)[1]

    run = jax.jit(jax.vmap(one_chain))
    init = jnp.asarray(x0.cpu().numpy())
    t0 = time.perf_counter()
    jax.block_until_ready(run(init, jax.random.split(jax.random.PRNGKey(0), chains)))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    samples, steps = run(init, jax.random.split(jax.random.PRNGKey(1), chains))
    jax.block_until_ready(samples)
    sec = time.perf_counter() - t0
    if algo == "HMC" and not bool((steps == cfg["num_steps"]).all()):
        raise RuntimeError("NumPyro did not take the configured number of leapfrog steps")
    x = torch.as_tensor(jax.device_get(samples).copy())
    return sec, first, x.reshape(chains, draws, -1), float(jax.device_get(steps).mean())


def pyro_run(t, x0, cfg, draws):
    import pyro
    from pyro.infer import HMC, MCMC

    logp = t.log_prob

    def potential(params):
        return -logp(params["x"][None])[0]

    kern = HMC(potential_fn=potential, step_size=cfg["step_size"], num_steps=cfg["num_steps"],
               adapt_step_size=False, adapt_mass_matrix=False)
    mcmc = MCMC(kern, num_samples=draws, warmup_steps=0, initial_params={"x": x0[0].clone()},
                disable_progbar=True)
    pyro.set_rng_seed(0)
    t0 = time.perf_counter()
    mcmc.run()
    sec = time.perf_counter() - t0
    return sec, mcmc.get_samples()["x"].reshape(1, draws, -1)


def row(sec, x, chains, cfg, draws, extra=None, grad_evals_per_draw=None):
    ess = ess_min(x)
    evals = cfg["num_steps"] if grad_evals_per_draw is None else grad_evals_per_draw
    r = {"chains": chains, "draws": draws, "seconds": round(sec, 3), "min_bulk_ess": round(ess, 1),
         "ess_per_s": round(ess / sec, 1), "grad_evals_per_s": round(chains * evals * draws / sec, 1)}
    r.update(extra or {})
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--targets", nargs="*", choices=TARGETS + SPOT_CHECKS, default=list(TARGETS),
                    help=f"default: the five benchmark targets; spot checks: {', '.join(SPOT_CHECKS)}")
    ap.add_argument("--samplers", nargs="+", choices=("hmc", "nuts"), default=["hmc", "nuts"],
                    help="which samplers to time (NUTS compiles for minutes on a GPU)")
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "mcmc_speed.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    chain_counts = [1, 100] if args.quick else [1, 100, 1000]
    if args.device == "cuda":
        chain_counts = [1000, 10000]
    draws_for = {1: 1000, 100: 300, 1000: 200, 10000: 200} if not args.quick else {1: 200, 100: 100}
    pyro_draws = 100 if args.quick else 300
    out = {"command": "python benchmarks/mcmc_speed.py " + " ".join(sys.argv[1:]),
           "torch": torch.__version__, "threads": 1, "dtype": "float64", "device": args.device, "results": {},
           "summary": {}}
    if args.targets != list(TARGETS) and os.path.exists(args.out):
        # a run of some targets replaces their rows and keeps the others' (from the same device)
        with open(args.out) as f:
            earlier = json.load(f)
        if earlier.get("device") == args.device:
            out["results"], out["summary"] = earlier.get("results", {}), earlier.get("summary", {})
            out["command"] = earlier.get("command", "") + " ; " + out["command"]
    if args.device == "cuda":       # NumPyro on the same GPU (JAX has not been imported yet)
        os.environ["JAX_PLATFORMS"] = "cuda"
    try:
        import jax
        import numpyro
        out["numpyro"], out["jax"] = numpyro.__version__, jax.__version__
        out["jax_backend"] = jax.default_backend()
        have_numpyro = True
    except ImportError:
        have_numpyro = False
    try:
        import pyro
        out["pyro"], have_pyro = pyro.__version__, True
    except ImportError:                 # the bench extra has it; without it the Pyro rows are left out
        have_pyro = False
    for name in args.targets:
        t, cfg, _ = problem(name)
        res = {}
        x_all, cfg = warm_start(t, cfg, max(chain_counts), "cpu")
        res["config"] = cfg
        if name in ("gauss100", "breast_cancer") and args.device == "cpu" and have_pyro:   # one chain; two targets
            psec, px = pyro_run(t, x_all[:1], cfg, pyro_draws)
            res["pyro_1chain"] = row(psec, px, 1, cfg, pyro_draws)
            print(name, "pyro", res["pyro_1chain"], flush=True)
        for c in chain_counts:
            d = draws_for[c]
            x0 = x_all[:c].to(args.device)
            variants = [("hmc", False, False), ("rhmc", True, False)] if c < 1000 else []
            variants.append(("hmc_compiled", False, True))
            if c >= 1000:
                variants.append(("hmc", False, False))
            for method, rel, comp in variants:
                sec, x, acc, first = ours(t, x0, cfg, d, rel, args.device, compile=comp)
                extra = {"acceptance": round(acc, 3)}
                if comp:
                    extra["first_step_seconds_incl_compile"] = round(first, 2)
                res[f"ours_{method}_{c}"] = row(sec, x, c, cfg, d, extra)
                print(name, method, res[f"ours_{method}_{c}"], flush=True)
            if have_numpyro:
                sec, first, x, _ = numpyro_run(t, x_all[:c], cfg, d)
                res[f"numpyro_hmc_{c}"] = row(sec, x, c, cfg, d, {"first_call_seconds_incl_compile": round(first, 2)})
                print(name, "numpyro", res[f"numpyro_hmc_{c}"], flush=True)
                for method in ("hmc", "hmc_compiled"):
                    res[f"ratio_ess_per_s_{method}_vs_numpyro_{c}"] = round(
                        res[f"ours_{method}_{c}"]["ess_per_s"] / max(res[f"numpyro_hmc_{c}"]["ess_per_s"], 1e-9), 3)
            if c >= 1000 and "nuts" in args.samplers:
                # compiled only: eager NUTS against NumPyro's is in benchmarks/nuts_validation.py (100 chains)
                sec, x, info, first = ours_nuts(t, x0, cfg, NUTS_DRAWS, args.device)
                extra = {"mean_tree_depth": round(info["tree_depth"].double().mean().item(), 2),
                         "mean_leapfrog_steps": round(info["num_steps"].double().mean().item(), 1),
                         "evaluated_grad_evals_per_draw": round(info["num_grad_evals"] / NUTS_DRAWS, 1),
                         "first_step_seconds_incl_compile": round(first, 2),
                         "first_steps": NUTS_WARMUP}
                res[f"ours_nuts_compiled_{c}"] = row(sec, x, c, cfg, NUTS_DRAWS, extra, extra["mean_leapfrog_steps"])
                print(name, "nuts_compiled", res[f"ours_nuts_compiled_{c}"], flush=True)
            if have_numpyro and c >= 1000 and "nuts" in args.samplers:
                sec, first, x, steps = numpyro_run(t, x_all[:c], cfg, NUTS_DRAWS, algo="NUTS")
                res[f"numpyro_nuts_{c}"] = row(sec, x, c, cfg, NUTS_DRAWS,
                                               {"first_call_seconds_incl_compile": round(first, 2),
                                                "mean_leapfrog_steps": round(steps, 1)}, steps)
                print(name, "numpyro nuts", res[f"numpyro_nuts_{c}"], flush=True)
            if have_numpyro and c >= 1000:
                entry = out["summary"].setdefault(name, {}).setdefault(str(c), {})
                for method, label in (("hmc", "HMC, fixed step size and leapfrog count"),
                                      ("nuts", f"multinomial NUTS, fixed step size, max tree depth {NUTS_MAX_DEPTH}")):
                    if method not in args.samplers:
                        continue
                    ours_row, peer = res[f"ours_{method}_compiled_{c}"], res[f"numpyro_{method}_{c}"]
                    entry[method] = {
                        "algorithm": label,
                        "ours": {"ess_per_s": ours_row["ess_per_s"], "seconds": ours_row["seconds"],
                                 "compile_seconds": ours_row["first_step_seconds_incl_compile"],
                                 "eager_ess_per_s": res.get(f"ours_{method}_{c}", {}).get("ess_per_s")},
                        "numpyro": {"ess_per_s": peer["ess_per_s"], "seconds": peer["seconds"],
                                    "compile_seconds": peer["first_call_seconds_incl_compile"]},
                        "ratio_ess_per_s": round(ours_row["ess_per_s"] / max(peer["ess_per_s"], 1e-9), 3)}
        out["results"][name] = res
        write_json(args.out, out)                 # after every target, so an interrupted run keeps what it measured
    print("wrote", args.out)


if __name__ == "__main__":
    main()

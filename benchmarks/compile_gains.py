"""What the compiled samplers' two code choices are worth, in one process run (issue 15; docs/inference_mcmc_stein.md).

1. The CPU code variant that ``hmc.fastest_compiled`` picks: a compiled HMC transition (10 leapfrog steps, 1 000
   chains, float64, one thread) with inductor's default vectors only, with scalar loops only, and autotuned, on the
   10-d funnel (narrow rows) and the 100-d Gaussian (wide rows): microseconds per transition, best of 3 x 100.
2. SG-MCMC's compiled update against the eager one (``sgmcmc.build(compile=True)``), 1 000 chains x 100-d with a
   cheap noisy gradient: milliseconds per step, best of 3 x 100.
3. The float64 matrix product a GEMM-bound target (mcmc_speed's dense_gauss200) pays per gradient, 1 000 x 200 by
   200 x 200 on one thread: torch's (MKL here) against XLA's (JAX, with the bench extras), milliseconds, best of
   3 x 100.

    python benchmarks/compile_gains.py          # ~3 minutes; writes benchmarks/results/compile_gains.json
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.runs import write_json  # noqa: E402
from inference import targets  # noqa: E402
from inference.mcmc import hmc, sgmcmc  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "compile_gains.json"


def best_time(call, repeats=3, calls=100):
    """The best over ``repeats`` of the mean seconds of ``calls`` calls, after one untimed call (compiles, warms)."""
    call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def best_seconds(step, state, generator):
    """``best_time`` of a kernel's step, each call continuing the chain."""
    def call():
        nonlocal state
        state, _ = step(state, generator)
    return best_time(call)


def code_variants() -> dict:
    out = {}
    for name, target, step_size in (("funnel10", targets.funnel(10), 0.1),
                                    ("gauss100", targets.gaussian(100, torch.linspace(0.5, 1.5, 100)), 0.15)):
        x0 = target.sample(1000, torch.Generator().manual_seed(1))
        row = {}
        for label, variants in (("vectors", ({},)), ("scalar_loops", ({"cpp.simdlen": 0},)),
                                ("autotuned", hmc._CPU_VARIANTS)):
            saved, hmc._CPU_VARIANTS = hmc._CPU_VARIANTS, variants
            try:
                kernel = hmc.build(target.log_prob, step_size, 10, compile=True)
                row[label + "_us_per_transition"] = round(1e6 * best_seconds(
                    kernel.step, kernel.init(x0), torch.Generator().manual_seed(3)), 1)
            finally:
                hmc._CPU_VARIANTS = saved
        out[name] = row
        print(name, row, flush=True)
    return out


def sgmcmc_update() -> dict:
    scales = torch.linspace(0.5, 1.5, 100, dtype=torch.float64)

    def noisy_grad(x, generator):
        return -x / scales ** 2 + 0.01 * torch.randn(x.shape, generator=generator, dtype=x.dtype)
    out = {}
    for method in ("sgld", "sghmc", "rsgnht"):
        row = {}
        for label, compile in (("eager", False), ("compiled", True)):
            kernel = sgmcmc.build(noisy_grad, 1e-2, method, compile=compile)
            g = torch.Generator().manual_seed(0)
            state = kernel.init(torch.zeros(1000, 100, dtype=torch.float64), g)
            row[label + "_ms_per_step"] = round(1e3 * best_seconds(kernel.step, state, g), 3)
        out[method] = row
        print(method, row, flush=True)
    return out


def gemm() -> dict:
    a = torch.randn(1000, 200, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    p = torch.randn(200, 200, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    out = {"torch_ms": round(1e3 * best_time(lambda: a @ p), 3)}
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:              # without the bench extras only torch's is measured
        return out
    jax.config.update("jax_enable_x64", True)
    product = jax.jit(lambda x, y: x @ y)
    ja, jp = jnp.asarray(a.numpy()), jnp.asarray(p.numpy())
    out["xla_ms"] = round(1e3 * best_time(lambda: product(ja, jp).block_until_ready()), 3)
    print("gemm", out, flush=True)
    return out


def main() -> None:
    torch.set_num_threads(1)
    write_json(RESULTS, {"command": "python benchmarks/compile_gains.py", "torch": torch.__version__,
                         "threads": 1, "dtype": "float64", "chains": 1000, "cpu_code_variants": code_variants(),
                         "sgmcmc_update": sgmcmc_update(), "float64_gemm_1000x200x200": gemm(),
                         "load_average_1min": os.getloadavg()[0]})
    print("wrote", RESULTS)


if __name__ == "__main__":
    main()

"""The SNEP posterior server (inference/ep/server.py, seed 000 Alg 8): the invariant after every push, refused bad
deltas, checkpoints, exactness of asynchronous SNEP on Bayesian linear regression (seed 003 case 8), and a run on Ray
that survives a killed worker and a killed server."""
import json

import pytest
import torch

from inference.ep import server, snep
from inference.ep.expfam import DiagGaussian, FullGaussian
from tests.inference.test_snep import regression


def start(n=2, site_var=0.01, d=3, **kw):
    theta0 = FullGaussian.natural_from_moments(torch.zeros(d, dtype=torch.float64), 10 * torch.eye(d, dtype=torch.float64))
    site = FullGaussian.natural_from_moments(torch.zeros(d, dtype=torch.float64),
                                             site_var * torch.eye(d, dtype=torch.float64))
    return server.PosteriorServer(theta0, [site] * n, "full", **kw)


def test_asynchronous_snep_is_exact_and_keeps_the_invariant_after_every_push():
    """Workers pushing every N_sync steps, replies one sync late (as over Ray): q reaches the closed-form posterior of
    Bayesian linear regression and each site its shard's exact likelihood; theta_post = theta_0 + sum of sites after
    every push (the server checks it on every push, and so does this test)."""
    Z, y, mean, cov = regression()
    shards = [snep.GaussianShard(Z[i::2], y[i::2], 0.3) for i in range(2)]
    srv = start(2)
    pushes = []
    push = srv.push

    def checked_push(*args):
        reply = push(*args)
        assert srv.check_invariant()
        pushes.append(args[0])
        return reply
    srv.push = checked_push
    settings = server.SNEPSettings(lr=0.3, n_sync=5, n_outer=1, power=1.0)
    workers = [server.SNEPWorker(i, shard, srv, settings, 2) for i, shard in enumerate(shards)]
    for _ in range(600):
        for w in workers:
            w.run(5)
    for w in workers:
        w.flush()
    m, c = server.posterior(srv.theta_post)
    assert torch.allclose(m, mean, atol=1e-9) and torch.allclose(c, cov, atol=1e-11)
    for shard, site in zip(shards, srv.sites):
        assert torch.allclose(site[1], shard.natural[1], rtol=1e-7)
    assert len(pushes) > 2 * 500 and set(pushes) == {0, 1}


def test_bad_deltas_are_refused_and_leave_the_server_untouched():
    srv = start(2)
    before = [t.clone() for t in srv.theta_post]
    good = (torch.zeros(3, dtype=torch.float64), torch.zeros(3, 3, dtype=torch.float64))
    nan = (torch.full((3,), float("nan"), dtype=torch.float64), good[1])
    improper = (good[0], 1e6 * torch.eye(3, dtype=torch.float64))
    for bad, match in [(nan, "not finite"), ((good[0], torch.zeros(2, 2)), "wrong shape"),
                       (improper, "outside the Gaussian family")]:
        with pytest.raises(server.ServerError, match=match):
            srv.push(0, bad)
    with pytest.raises(server.ServerError, match="no worker 5"):
        srv.push(5, good)
    assert all(torch.equal(a, b) for a, b in zip(before, srv.theta_post)) and srv.pushes == 0
    assert srv.check_invariant()


def test_checkpoint_resumes_and_a_corrupt_one_is_one_error(tmp_path):
    srv = start(2, checkpoint_dir=str(tmp_path))
    delta = (torch.ones(3, dtype=torch.float64), -torch.eye(3, dtype=torch.float64))
    srv.push(1, delta, position=torch.arange(3.0), step=7)
    again = start(2, checkpoint_dir=str(tmp_path))
    assert again.resumed and again.pushes == 1 and again.steps == [0, 7]
    assert all(torch.equal(a, b) for a, b in zip(again.theta_post, srv.theta_post))
    assert torch.equal(again.worker_state(1)["position"], torch.arange(3.0)) and again.check_invariant()
    meta = json.loads((tmp_path / "server.json").read_text())
    assert meta["pushes"] == 1 and meta["family"] == "full"
    (tmp_path / "server.safetensors").write_bytes(b"not a checkpoint")
    with pytest.raises(server.ServerError, match="unreadable"):
        start(2, checkpoint_dir=str(tmp_path))


def test_settings_are_checked():
    for kw, match in [({"lr": 0}, "lr"), ({"n_sync": 0}, "n_sync"), ({"family": "student"}, "family"),
                      ({"power": -1.0}, "power")]:
        with pytest.raises(ValueError, match=match):
            server.SNEPSettings(**kw).validate(2)
    with pytest.raises(ValueError, match="at least one worker"):
        server.SNEPSettings().validate(0)


def test_unreachable_ray_address_is_one_error():
    from cluster import ClusterError

    Z, y, _, _ = regression()
    with pytest.raises(ClusterError, match="cannot reach the Ray cluster at 127.0.0.1:1"):
        server.run([snep.GaussianShard(Z, y, 0.3)], torch.zeros(3), torch.eye(3), steps=10, address="127.0.0.1:1")


@pytest.mark.slow
def test_diagonal_family_sampled_shards_in_process():
    """The seed's network setting in miniature: a diagonal Gaussian family, sites from HMC draws (one per step), two
    workers: q's mean lands near the exact posterior mean of a well-conditioned linear regression."""
    g = torch.Generator().manual_seed(1)
    Z = torch.randn(200, 2, dtype=torch.float64, generator=g)
    y = Z @ torch.tensor([1.0, -0.5], dtype=torch.float64) + 0.5 * torch.randn(200, dtype=torch.float64, generator=g)
    precision = Z.T @ Z / 0.25 + torch.eye(2, dtype=torch.float64)
    exact = torch.linalg.solve(precision, Z.T @ y / 0.25)

    def shard(rows):
        return snep.SampledShard(lambda x, z=Z[rows], t=y[rows]: -0.5 * ((x @ z.T - t) ** 2).sum(-1) / 0.25, dim=2,
                                 samples=1, chains=4, step_size=0.05, leapfrog=5, family=DiagGaussian)
    theta0 = DiagGaussian.natural_from_moments(torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64))
    site = DiagGaussian.natural_from_moments(torch.zeros(2, dtype=torch.float64), torch.full((2,), 0.1, dtype=torch.float64))
    srv = server.PosteriorServer(theta0, [site, site], "diag")
    settings = server.SNEPSettings(lr=0.05, n_sync=5, n_outer=5, family="diag")
    torch.manual_seed(0)
    workers = [server.SNEPWorker(i, shard(slice(i, None, 2)), srv, settings, 2, seed=3) for i in range(2)]
    for _ in range(60):
        for w in workers:
            w.run(10)
    m, _ = server.posterior(srv.theta_post, "diag")
    assert torch.allclose(m, exact, atol=0.05), (m, exact)
    assert srv.check_invariant()


@pytest.mark.slow
def test_ray_run_survives_a_killed_worker_and_a_killed_server(tmp_path):
    """Two worker actors and the server actor on a local Ray cluster; worker 1 is killed after the first returned
    call and the server after the third. Ray restarts both: the worker from the server's record of it, the server
    from its checkpoint. The run finishes every step, the invariant holds at the end (``run`` checks it), and with
    the workers' lead bounded (``max_lead``) q reaches the closed form whatever the actors' timing."""
    Z, y, mean, cov = regression()
    shards = [snep.GaussianShard(Z[i::2], y[i::2], 0.3) for i in range(2)]
    settings = server.SNEPSettings(lr=0.3, n_sync=5, n_outer=1, power=1.0)
    result = server.run(shards, torch.zeros(3), 10 * torch.eye(3), steps=2500, settings=settings, site_var=0.01,
                        chunk=100, num_cpus=2, checkpoint_dir=str(tmp_path),
                        kill=lambda calls: {1: 1, 3: "server"}.get(calls))
    m, c = server.posterior(result.theta_post)
    assert result.restarts >= 1 and result.steps == [2500, 2500]
    errors = float((m - mean).abs().max()), float((c - cov).abs().max())
    assert max(errors) < 1e-8, errors
    assert result.pushes > 100 and (tmp_path / "server.safetensors").is_file()
    assert server.PosteriorServer(None, [], "full", checkpoint_dir=str(tmp_path)).resumed   # the checkpoint loads


def test_psnep_with_adaptive_sgld_learns_a_small_network():
    """The seed's network setting (§6.2.1, App. B.1) on scikit-learn's digits: two p-SNEP workers with minibatch
    adaptive SGLD, diagonal family, site variance floor 0.01. The server's posterior mean classifies held-out digits
    far better than chance (10 % correct) after 400 steps per worker; every site respects the floor."""
    from benchmarks.snep import DigitsShardLikelihood, digits, mlp_logits, xavier

    Xtr, ytr, Xte, yte = digits()
    d = xavier(0).numel()
    shards = [snep.MinibatchShard(DigitsShardLikelihood(Xtr[i::2], ytr[i::2]), size=len(ytr[i::2]), state=xavier(0))
              for i in range(2)]
    theta0 = DiagGaussian.natural_from_moments(torch.zeros(d, dtype=torch.float64), torch.full((d,), 0.05, dtype=torch.float64))
    site = DiagGaussian.natural_from_moments(torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64))
    srv = server.PosteriorServer(theta0, [site, site], "diag")
    settings = server.SNEPSettings(lr=0.02, n_sync=10, n_outer=10, power="parallel", family="diag",
                                   min_site_variance=0.01)
    workers = [server.SNEPWorker(i, shard, srv, settings, 2) for i, shard in enumerate(shards)]
    for _ in range(8):
        for w in workers:
            w.run(50)
    mean, _ = server.posterior(srv.theta_post, "diag")
    error = float((mlp_logits(mean.float(), Xte).argmax(-1) != yte).float().mean())
    assert error < 0.2, error
    for s in srv.sites:
        assert bool((s[1] >= -1 / 0.01 - 1e-9).all())
    with pytest.raises(ValueError, match="no data"):
        snep.MinibatchShard(DigitsShardLikelihood(Xtr[:0], ytr[:0]), size=0, state=xavier(0))
    with pytest.raises(ValueError, match="min_site_variance"):
        server.SNEPSettings(min_site_variance=0.01, family="full").validate(2)


def test_more_workers_than_cpus_is_one_error_not_a_hang():
    from cluster import ClusterError

    Z, y, _, _ = regression()
    shards = [snep.GaussianShard(Z[i::3], y[i::3], 0.3) for i in range(3)]
    with pytest.raises(ClusterError, match="3 workers need 3 CPUs but the Ray cluster has 2"):
        server.run(shards, torch.zeros(3), torch.eye(3), steps=10, num_cpus=2)

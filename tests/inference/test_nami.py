"""NaMI graph inversion and structured inference networks (inference/graphs.py, inference/vi/nami.py).

Seed 003 case 4 (structural unit tests) and the exact part of case 5 (faithful vs unfaithful KL floors)."""
import random
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.nami import LinearGaussianTree, binary_tree, gmm_network, student_network  # noqa: E402
from inference.graphs import (BayesNet, Inverse, d_separated, is_faithful, is_minimal, moralise,  # noqa: E402
                              naturalness, redundant_edges)
from inference.vi.nami import (AmortisedInverse, Family, edge_reversal_inverse, elimination_trace,  # noqa: E402
                               fully_connected_inverse, gaussian_kl_floor, inference_compilation_loss,
                               nami_inverse, stuhlmuller_inverse)


def test_figure3_trace_step_by_step():
    bn = student_network()
    trace = elimination_trace(bn, "forward")
    assert [s["eliminated"] for s in trace] == ["D", "I", "S", "G", "L"]
    assert trace[0]["costs"]["D"] == 0 and trace[0]["costs"]["I"] > 0       # D wins the first min-fill choice
    assert set(trace[0]["parents"]) == {"I", "G"} and not trace[0]["fill_in"]
    assert set(trace[1]["parents"]) == {"G", "S"} and trace[1]["fill_in"] == [("G", "S")]
    assert set(trace[2]["parents"]) == {"G", "L", "J"}
    assert set(trace[3]["parents"]) == {"L", "H", "J"} and trace[3]["fill_in"] == [("L", "H")]
    assert set(trace[4]["parents"]) == {"J", "H"}
    inverse = nami_inverse(bn, "forward")
    assert inverse.order == ("L", "G", "S", "I", "D")
    assert is_minimal(inverse, bn) and naturalness(inverse, bn) == "reversed"


def test_moral_graph_adds_exactly_the_coparent_edges():
    bn = student_network()
    moral = moralise(bn)
    added = {frozenset((a, b)) for a in moral for b in moral[a] if a not in bn.parents[b] and b not in bn.parents[a]}
    assert added == {frozenset("DI"), frozenset("LS"), frozenset("GJ")}


def test_d_separation_on_the_three_canonical_trails():
    chain = BayesNet.from_edges([("a", "b"), ("b", "c")])
    fork = BayesNet.from_edges([("b", "a"), ("b", "c")])
    collider = BayesNet.from_edges([("a", "b"), ("c", "b"), ("b", "d")])
    for bn in (chain, fork):
        assert not d_separated(bn, {"a"}, {"c"})
        assert d_separated(bn, {"a"}, {"c"}, {"b"})
    assert d_separated(collider, {"a"}, {"c"})
    assert not d_separated(collider, {"a"}, {"c"}, {"b"})
    assert not d_separated(collider, {"a"}, {"c"}, {"d"})          # a descendant of the collider opens it


def test_d_separation_agrees_with_a_gaussian_network_on_random_graphs():
    """d-separated <=> zero partial correlation, for a linear-Gaussian network with generic weights."""
    rng = random.Random(3)
    checked = 0
    for _ in range(40):
        n = rng.randint(3, 7)
        nodes = [f"v{i}" for i in range(n)]
        edges = [(nodes[i], nodes[j]) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.4]
        bn = BayesNet.from_edges(edges, nodes=nodes)
        B = torch.zeros(n, n, dtype=torch.float64)
        for a, b in edges:
            B[nodes.index(b), nodes.index(a)] = rng.uniform(0.5, 1.5) * rng.choice((-1, 1))
        A = torch.linalg.inv(torch.eye(n, dtype=torch.float64) - B)
        cov = A @ A.T
        for _ in range(10):
            i, j = rng.sample(range(n), 2)
            given = [k for k in range(n) if k not in (i, j) and rng.random() < 0.4]
            idx = [i, j] + given
            precision = torch.linalg.inv(cov[idx][:, idx])
            dependent = abs(float(precision[0, 1])) > 1e-9
            assert d_separated(bn, {nodes[i]}, {nodes[j]}, {nodes[k] for k in given}) == (not dependent)
            checked += 1
    assert checked == 400


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_nami_is_faithful_minimal_and_natural_on_random_dags(mode):
    rng = random.Random(11)
    unfaithful_heuristic = 0
    for _ in range(300):
        n = rng.randint(2, 10)
        nodes = [f"v{i}" for i in range(n)]
        edges = [(nodes[i], nodes[j]) for i in range(n) for j in range(i + 1, n) if rng.random() < rng.uniform(.2, .6)]
        leaves = {v for v in nodes if not any(a == v for a, _ in edges)}
        bn = BayesNet.from_edges(edges, leaves, nodes)
        if not bn.latents:
            continue
        inverse = nami_inverse(bn, mode)
        assert is_faithful(inverse, bn) and not redundant_edges(inverse, bn)
        assert naturalness(inverse, bn) in (("reversed", "both") if mode == "forward" else ("kept", "both"))
        unfaithful_heuristic += not is_faithful(stuhlmuller_inverse(bn), bn)
    assert unfaithful_heuristic > 10


def test_reverse_nami_sets_barren_latents_aside():
    """A latent with no observed descendant must not tie its co-parents together."""
    bn = BayesNet.from_edges([("a", "c"), ("b", "c"), ("a", "x"), ("b", "y")], observed={"x", "y"})
    inverse = nami_inverse(bn, "reverse")
    assert inverse.order[-1] == "c" and set(inverse.parents["c"]) == {"a", "b"}
    assert is_minimal(inverse, bn) and naturalness(inverse, bn) == "kept"
    assert set(inverse.parents["a"]) == {"x"} or set(inverse.parents["b"]) == {"y"}


def test_vae_inverse_is_a_clique_and_both_modes_coincide():
    parents = {f"z{k}": () for k in range(3)}
    parents.update({f"x{m}": ("z0", "z1", "z2") for m in range(4)})
    bn = BayesNet(parents, frozenset(f"x{m}" for m in range(4)))
    fwd, rev = nami_inverse(bn, "forward"), nami_inverse(bn, "reverse")
    assert len(fwd.latent_edges()) == 3 and {v: set(p) for v, p in fwd.parents.items()} == \
        {v: set(p) for v, p in rev.parents.items()}
    assert not is_faithful(edge_reversal_inverse(bn), bn)          # mean field ignores explaining away


def test_binary_tree_compactness_and_gmm_factorisation():
    for depth in (4, 5):
        bn = binary_tree(depth)
        counts = [nami_inverse(bn, m).num_edges for m in ("reverse", "forward")]
        assert counts[0] < counts[1] < fully_connected_inverse(bn).num_edges
    bn = gmm_network(4, 2)
    inverse = nami_inverse(bn, "reverse")
    for i in range(4):
        assert set(inverse.parents[f"z{i}"]) == {f"x{i}", "phi", "mu0", "mu1"}
    assert is_minimal(inverse, bn)


def test_gaussian_kl_floor_is_zero_exactly_for_faithful_structures():
    model = LinearGaussianTree(4)
    bn = model.bn
    for inverse in (nami_inverse(bn, "forward"), nami_inverse(bn, "reverse"), fully_connected_inverse(bn)):
        assert abs(gaussian_kl_floor(inverse, model.cov, model.index)) < 1e-9
    for inverse in (stuhlmuller_inverse(bn), edge_reversal_inverse(bn)):
        assert gaussian_kl_floor(inverse, model.cov, model.index) > 0.1
    # dropping one edge of a minimal faithful inverse opens a positive floor
    inverse = nami_inverse(bn, "reverse")
    v = next(v for v in inverse.order if inverse.parents[v])
    parents = dict(inverse.parents)
    parents[v] = parents[v][1:]
    assert gaussian_kl_floor(Inverse(inverse.order, parents, inverse.observed), model.cov, model.index) > 1e-3


@pytest.mark.parametrize("maker", [lambda bn: nami_inverse(bn, "forward"), lambda bn: nami_inverse(bn, "reverse"),
                                   stuhlmuller_inverse, fully_connected_inverse])
def test_structured_made_outputs_depend_exactly_on_the_parent_sets(maker):
    bn = student_network()
    inverse = maker(bn)
    q = AmortisedInverse(inverse, {v: Family("normal") for v in inverse.order}, {"H": 1, "J": 1}, hidden=(16, 16))
    features = torch.randn(1, q.net.num_inputs)
    jac = torch.autograd.functional.jacobian(q.net, features)[0, :, 0, :]
    for w in inverse.order:
        rows = slice(*q.net.out_slices[w])
        depends = {u for u in q.net.inputs if jac[rows, slice(*q.net.in_slices[u])].abs().sum() > 0}
        assert depends == set(inverse.parents[w])


@pytest.mark.slow
def test_inference_compilation_reaches_the_exact_posterior_on_a_small_tree():
    """Depth 3 linear-Gaussian tree: the reverse-NaMI network's KL to the exact posterior falls below 0.05 nats,
    the Stuhlmüller network's stays above its analytic floor (> 0)."""
    from benchmarks.nami import tree_kl

    model = LinearGaussianTree(3)
    faithful = tree_kl(model, nami_inverse(model.bn, "reverse"), 1500, 0, (1500,))[1500]
    heuristic_inverse = stuhlmuller_inverse(model.bn)
    floor = gaussian_kl_floor(heuristic_inverse, model.cov, model.index)
    heuristic = tree_kl(model, heuristic_inverse, 1500, 0, (1500,))[1500]
    assert faithful < 0.05
    assert floor > 0.05 and heuristic > floor - 0.02


def test_sampling_order_and_log_prob_with_mixed_families():
    bn = gmm_network(3, 2)
    inverse = nami_inverse(bn, "reverse")
    families = {"phi": Family("dirichlet", 2), "mu0": Family("normal"), "mu1": Family("normal")}
    families.update({f"z{i}": Family("categorical", 2) for i in range(3)})
    q = AmortisedInverse(inverse, families, {f"x{i}": 1 for i in range(3)}, hidden=(8,))
    x = {f"x{i}": torch.randn(5) for i in range(3)}
    z = q.sample(x)
    assert z["phi"].shape == (5, 2) and torch.allclose(z["phi"].sum(-1), torch.ones(5))
    assert z["z0"].dtype == torch.long and z["mu0"].shape == (5,)
    loss = inference_compilation_loss(q, {**x, **z})
    loss.backward()
    assert torch.isfinite(loss)


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="cycle: a -> b -> c -> a"):
        BayesNet.from_edges([("a", "b"), ("b", "c"), ("c", "a")])
    with pytest.raises(ValueError, match="not a node"):
        BayesNet({"a": ("ghost",)})
    with pytest.raises(ValueError, match="mode must be"):
        nami_inverse(student_network(), "sideways")
    with pytest.raises(ValueError, match="neither observed nor sampled before"):
        Inverse(("a", "b"), {"a": ("b",), "b": ()}, ())
    with pytest.raises(ValueError, match="unknown family"):
        Family("poisson")
    small = nami_inverse(student_network())
    with pytest.raises(ValueError, match="at least the number of latents"):
        AmortisedInverse(small, {v: Family("normal") for v in small.order}, {"H": 1, "J": 1}, hidden=(3, 3))
    bn = gmm_network(2, 2)
    inverse = nami_inverse(bn, "reverse")
    families = {"phi": Family("dirichlet", 2), "mu0": Family("normal"), "mu1": Family("normal"),
                "z0": Family("categorical", 2), "z1": Family("categorical", 2)}
    q = AmortisedInverse(inverse, families, {"x0": 1, "x1": 1}, hidden=(8,))
    values = {"x0": torch.zeros(2), "x1": torch.zeros(2), "mu0": torch.zeros(2), "mu1": torch.zeros(2),
              "z0": torch.zeros(2, dtype=torch.long), "z1": torch.zeros(2, dtype=torch.long),
              "phi": torch.tensor([[0.5, 0.5], [float("nan"), 0.5]])}
    with pytest.raises(ValueError):
        q.log_prob(values)

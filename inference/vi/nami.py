"""NaMI: natural, minimally faithful inverses of Bayesian networks, and inference networks built on them.

Seed 003 Ch 3 (Webb, Golinski, Zinkov, Siddharth, Rainforth, Teh, Wood, NeurIPS 2018; extraction
``../shared/research/seed003.md`` §2.2-2.3). The thesis file lacks Algorithm 1; the procedure below is rebuilt from
the §2.2 trace and Table 1, and reproduces that trace step for step (tests/inference/test_nami.py):

1. J <- moralise(G); H <- the latents, no edges; nothing marked;
2. frontier S <- the latents with no latent ancestors (forward: topological elimination) or no latent descendants
   (reverse);
3. while S is not empty: v <- argmin over S of the fill-in (edges needed to make v's unmarked J-neighbours a
   clique); ties go to the node listed first in G (the seed leaves ties open);
4. add the fill-in edges to J (the intermediate factor psi_v(v, neighbours));
5. Pa_H(v) <- the unmarked J-neighbours of v (observed variables included);
6. mark v, remove it from S; add each latent whose latent ancestors (forward) / descendants (reverse) are now all
   marked (the seed says parents / children; ancestry through observed variables keeps the order natural when
   observed variables sit inside the graph, and is the same thing when they are the leaves);
7. the sampling order tau is the reverse of the elimination order (Ch3 eq. (1)).

Forward-NaMI reverses the order of random choices, reverse-NaMI keeps it (the seed states the reverse frontier
rule only as "reverse-topological"; the rule above is our reading). Theorem 1: the result is natural and minimally
faithful (``inference.graphs`` checks both); measured on random graphs it holds whenever the observed variables are
the leaves. Outside that setting, forward mode can keep a redundant edge when a latent has no observed descendant
(reverse mode sets such latents aside); ``inference.graphs.redundant_edges`` finds them. Minimality is local: run
both modes and keep the more compact one.

Heuristics for comparison (§2.1): ``edge_reversal_inverse`` (each latent conditioned on its children only, as in a
mean-field encoder) and ``stuhlmuller_inverse`` (Stuhlmüller et al. 2013 / Paige & Wood 2016: the children and the
children's other parents). Both need an order to be a DAG: we sample in reverse topological order and keep the
conditioning variables sampled before. ``fully_connected_inverse`` (Le et al. 2017) is faithful but ignores the
structure.

Inference networks (§2.3): ``StructuredMADE`` generalises MADE's masks from an order to arbitrary parent sets (the
"App. E.2 variant", not in the file; derived here). Every hidden unit is labelled with a latent v and sees only
inputs in Pa_H(v); a unit labelled v feeds a unit or an output labelled w only if Pa_H(v) is a subset of Pa_H(w).
Then output w depends on nothing outside Pa_H(w), scoring all factors takes one pass, and for the fully connected
inverse the construction is MADE's (nested parent sets = degrees). An optional masked skip connection from inputs
to outputs (Paige & Wood 2016) lets a factor be exactly linear in its parents. ``AmortisedInverse`` puts one
distribution family per latent on top (Normal, Categorical, Dirichlet: the family of the variable in the model, so
supports match); ``inference_compilation_loss`` is L_IC = E_{p(x,z)}[-log q(z | x)] (fixed-model setting, equal to
E_x KL(p(z | x) || q(z | x)) up to a constant).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributions import Categorical, Dirichlet, Distribution, Independent, Normal

from inference.flows.iaf import MaskedLinear
from inference.graphs import BayesNet, Inverse, moralise

__all__ = ["nami_inverse", "elimination_trace", "stuhlmuller_inverse", "edge_reversal_inverse",
           "fully_connected_inverse", "Family", "StructuredMADE", "AmortisedInverse", "inference_compilation_loss"]

MODES = ("forward", "reverse")


def elimination_trace(bn: BayesNet, mode: str = "forward") -> list[dict]:
    """The simulated elimination, one record per step: the eliminated latent, its H-parents, the fill-in edges
    added and the fill-in cost of every frontier candidate (the §2.2 trace)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    latents = set(bn.latents)
    index = {v: i for i, v in enumerate(bn.nodes)}
    # a latent joins the frontier once its latent ancestors (forward) / descendants (reverse) are eliminated:
    # ancestry counts paths through observed variables too, so the order of random choices is kept across them
    if mode == "forward":
        before = {v: bn.ancestors([v]) & latents for v in latents}
    else:
        before = {v: bn.descendants(v) & latents for v in latents}
    adj = moralise(bn)
    marked: set[str] = set()
    frontier = sorted((v for v in latents if not before[v]), key=index.get)

    def open_neighbours(u: str) -> list[str]:
        return sorted((w for w in adj[u] if w not in marked), key=index.get)

    def fill_in(u: str) -> list[tuple[str, str]]:
        nbrs = open_neighbours(u)
        return [(a, b) for i, a in enumerate(nbrs) for b in nbrs[i + 1:] if b not in adj[a]]

    trace = []
    while frontier:
        costs = {u: len(fill_in(u)) for u in frontier}
        v = min(frontier, key=lambda u: (costs[u], index[u]))
        fill = fill_in(v)
        for a, b in fill:
            adj[a].add(b)
            adj[b].add(a)
        trace.append({"eliminated": v, "parents": tuple(open_neighbours(v)), "fill_in": fill, "costs": costs})
        marked.add(v)
        frontier.remove(v)
        frontier = sorted((u for u in latents if u not in marked and before[u] <= marked), key=index.get)
    if len(marked) != len(latents):      # cannot happen on a DAG; guards the frontier rule
        raise RuntimeError(f"NaMI left latents uneliminated: {sorted(latents - marked)}")
    return trace


def nami_inverse(bn: BayesNet, mode: str = "forward") -> Inverse:
    """The NaMI inverse of ``bn`` (``mode`` "forward": topological elimination, "reverse": reverse-topological).

    Reverse mode first sets aside barren latents (no observed descendant): they do not touch p(other z | x), and
    their moral edges would otherwise make their co-parents look dependent. They come last, each given its G-parents
    (their exact conditional), which keeps the generative order."""
    if mode == "reverse":
        relevant = bn.ancestors(bn.observed)
        barren = [v for v in bn.topological_order() if v not in bn.observed and v not in relevant]
        if barren:
            kept = {v: ps for v, ps in bn.parents.items() if v not in barren}
            core = nami_inverse(BayesNet(kept, bn.observed), "reverse")
            return Inverse(core.order + tuple(barren), {**core.parents, **{v: bn.parents[v] for v in barren}},
                           _observed(bn))
    trace = elimination_trace(bn, mode)
    order = tuple(step["eliminated"] for step in reversed(trace))
    return Inverse(order, {step["eliminated"]: step["parents"] for step in trace}, _observed(bn))


def _observed(bn: BayesNet) -> tuple[str, ...]:
    return tuple(v for v in bn.nodes if v in bn.observed)


def _heuristic(bn: BayesNet, with_coparents: bool) -> Inverse:
    latents = set(bn.latents)
    order = tuple(v for v in reversed(bn.topological_order()) if v in latents)
    available, parents = set(bn.observed), {}
    for v in order:
        wanted = []
        for c in bn.children[v]:
            wanted.append(c)
            if with_coparents:
                wanted.extend(p for p in bn.parents[c] if p != v)
        parents[v] = tuple(dict.fromkeys(w for w in wanted if w in available))
        available.add(v)
    return Inverse(order, parents, _observed(bn))


def stuhlmuller_inverse(bn: BayesNet) -> Inverse:
    """The heuristic inverse: each latent given its children and their other parents, in reverse topological
    order (generally unfaithful: it ignores explaining-away paths through the latents sampled after it)."""
    return _heuristic(bn, with_coparents=True)


def edge_reversal_inverse(bn: BayesNet) -> Inverse:
    """Edges inverted, nothing added (the mean-field-style encoder of Kingma & Welling)."""
    return _heuristic(bn, with_coparents=False)


def fully_connected_inverse(bn: BayesNet, order: tuple[str, ...] | None = None) -> Inverse:
    """Every latent given all observed variables and all latents before it (``order``: default reverse
    topological)."""
    latents = set(bn.latents)
    order = tuple(v for v in reversed(bn.topological_order()) if v in latents) if order is None else tuple(order)
    observed = _observed(bn)
    return Inverse(order, {v: observed + order[:i] for i, v in enumerate(order)}, observed)


# ---------------------------------------------------------------------------------------------------------------
# Inference networks over an inverse


@dataclass(frozen=True)
class Family:
    """The distribution family of one variable: ``"normal"`` (``size`` independent coordinates, a diagonal
    Gaussian), ``"categorical"`` (``size`` classes; fed to the network one-hot) or ``"dirichlet"`` (``size``
    components)."""
    kind: str
    size: int = 1

    def __post_init__(self):
        if self.kind not in ("normal", "categorical", "dirichlet"):
            raise ValueError(f"unknown family {self.kind!r}; use normal, categorical or dirichlet")
        if self.size < 1 or (self.kind != "normal" and self.size < 2):
            raise ValueError(f"a {self.kind} family needs size >= {1 if self.kind == 'normal' else 2}")

    @property
    def num_params(self) -> int:
        return 2 * self.size if self.kind == "normal" else self.size

    @property
    def num_inputs(self) -> int:
        return self.size

    def features(self, value: Tensor) -> Tensor:
        """The value as network input: [..., size]."""
        if self.kind == "categorical":
            return F.one_hot(value.long(), self.size).to(torch.get_default_dtype())
        if self.kind == "dirichlet":
            return torch.log(value.clamp_min(1e-12))
        return value.reshape(value.shape[0], self.size).to(torch.get_default_dtype())

    def distribution(self, params: Tensor) -> Distribution:
        if self.kind == "categorical":
            return Categorical(logits=params)
        if self.kind == "dirichlet":
            return Dirichlet(F.softplus(params) + 1e-3)
        mean, raw_std = params.chunk(2, dim=-1)
        return Independent(Normal(mean, F.softplus(raw_std) + 1e-4), 1)


class StructuredMADE(nn.Module):
    """Masked network whose output block for latent w depends only on the inputs of Pa_H(w) (module docstring).

    ``input_sizes``: the feature width of every variable, observed and latent; ``output_sizes``: the number of
    parameters of every latent. ``hidden``: layer widths; units are labelled with the latents in turn (MADE's
    spread of degrees)."""

    def __init__(self, inverse: Inverse, input_sizes: Mapping[str, int], output_sizes: Mapping[str, int],
                 hidden: tuple[int, ...] = (64, 64), skip: bool = True):
        super().__init__()
        inputs = tuple(inverse.observed) + tuple(inverse.order)
        missing = [v for v in inputs if v not in input_sizes] + [v for v in inverse.order if v not in output_sizes]
        if missing:
            raise ValueError(f"no size given for {missing}")
        if not hidden or min(hidden) < len(inverse.order):
            raise ValueError(f"hidden must list widths of at least the number of latents ({len(inverse.order)}), so "
                             f"that every factor gets units; got {tuple(hidden)}")
        self.inputs, self.latents = inputs, tuple(inverse.order)
        parents = {v: frozenset(inverse.parents[v]) for v in self.latents}
        in_label = [v for v in inputs for _ in range(input_sizes[v])]
        out_label = [v for v in self.latents for _ in range(output_sizes[v])]
        self.out_slices = {}
        start = 0
        for v in self.latents:
            self.out_slices[v] = (start, start + output_sizes[v])
            start += output_sizes[v]
        in_start, self.in_slices = 0, {}
        for v in inputs:
            self.in_slices[v] = (in_start, in_start + input_sizes[v])
            in_start += input_sizes[v]

        def spread(width: int) -> list[str]:    # labels spread evenly over the latents (width >= their number)
            n = len(self.latents)
            return [self.latents[(i * n) // width] for i in range(width)]

        layers, labels = [], None
        for width in hidden:
            new = spread(width)
            if labels is None:
                mask = torch.tensor([[u in parents[h] for u in in_label] for h in new])
                layers.append(MaskedLinear(len(in_label), width, mask))
            else:
                mask = torch.tensor([[parents[a] <= parents[h] for a in labels] for h in new])
                layers.append(MaskedLinear(len(labels), width, mask))
            labels = new
        self.hidden_layers = nn.ModuleList(layers)
        self.head = MaskedLinear(len(labels), len(out_label),
                                 torch.tensor([[parents[a] <= parents[w] for a in labels] for w in out_label]))
        self.skip = MaskedLinear(len(in_label), len(out_label),
                                 torch.tensor([[u in parents[w] for u in in_label] for w in out_label])) \
            if skip else None
        with torch.no_grad():
            self.head.weight.mul_(0.1)
        self.num_inputs, self.num_outputs = len(in_label), len(out_label)

    def forward(self, features: Tensor) -> Tensor:
        h = features
        for layer in self.hidden_layers:
            h = F.elu(layer(h))
        out = self.head(h)
        return out + self.skip(features) if self.skip is not None else out


class AmortisedInverse(nn.Module):
    """q(z | x) = prod_i q_i(z_tau(i) | Pa_H(z_tau(i))), each factor of the family of its variable, parameters from
    one ``StructuredMADE``. Values are dicts name -> tensor with a leading batch dimension (``[B]`` for scalars and
    categoricals, ``[B, size]`` for vectors)."""

    def __init__(self, inverse: Inverse, families: Mapping[str, Family], observed_sizes: Mapping[str, int],
                 hidden: tuple[int, ...] = (64, 64), skip: bool = True):
        super().__init__()
        missing = [v for v in inverse.order if v not in families]
        if missing:
            raise ValueError(f"no family given for latents {missing}")
        self.inverse, self.families = inverse, dict(families)
        sizes = {**{v: int(observed_sizes[v]) for v in inverse.observed},
                 **{v: families[v].num_inputs for v in inverse.order}}
        self.net = StructuredMADE(inverse, sizes, {v: families[v].num_params for v in inverse.order}, hidden, skip)
        self.observed_sizes = {v: int(observed_sizes[v]) for v in inverse.observed}

    def _features(self, values: Mapping[str, Tensor], batch: int) -> Tensor:
        blocks = []
        for v in self.net.inputs:
            if v in self.families:
                blocks.append(self.families[v].features(values[v]) if v in values
                              else torch.zeros(batch, self.families[v].num_inputs))
            else:
                x = values[v]
                blocks.append(x.reshape(batch, self.observed_sizes[v]).to(torch.get_default_dtype()))
        return torch.cat(blocks, dim=-1)

    def factors(self, values: Mapping[str, Tensor]) -> dict[str, Distribution]:
        """Every factor's distribution given the values of its parents (one network pass)."""
        missing = [v for v in self.inverse.observed if v not in values]
        if missing:
            raise ValueError(f"observed values missing for {missing}")
        batch = values[self.inverse.observed[0]].shape[0] if self.inverse.observed else \
            next(iter(values.values())).shape[0]
        params = self.net(self._features(values, batch))
        return {v: self.families[v].distribution(params[:, slice(*self.net.out_slices[v])])
                for v in self.inverse.order}

    def log_prob(self, values: Mapping[str, Tensor]) -> Tensor:
        """log q(z | x) [B] for the latents and observed values in ``values`` (all given: O(1) scoring)."""
        factors = self.factors(values)
        total = 0.0
        for v, dist in factors.items():
            lp = dist.log_prob(self._value_for(v, values[v]))
            if not torch.isfinite(lp).all():
                raise ValueError(f"log q({v} | ...) is not finite; check that {v}'s values lie in the support of "
                                 f"its {self.families[v].kind} family")
            total = total + lp
        return total

    def _value_for(self, v: str, value: Tensor) -> Tensor:
        fam = self.families[v]
        return value.reshape(value.shape[0], fam.size) if fam.kind == "normal" else value

    @torch.no_grad()
    def sample(self, observed: Mapping[str, Tensor]) -> dict[str, Tensor]:
        """z ~ q(z | x), factor by factor in the order tau (one pass per latent)."""
        values = dict(observed)
        for v in self.inverse.order:
            dist = self.factors(values)[v]
            z = dist.sample()
            values[v] = z.reshape(-1) if self.families[v].kind == "normal" and self.families[v].size == 1 else z
        return {v: values[v] for v in self.inverse.order}


def inference_compilation_loss(q: AmortisedInverse, joint_samples: Mapping[str, Tensor]) -> Tensor:
    """L_IC = E_{p(x, z)}[-log q(z | x)] over samples of the model (seed 003 §2.3)."""
    return -q.log_prob(joint_samples).mean()


def gaussian_conditional_entropy(cov: Tensor, target: list[int], given: list[int]) -> Tensor:
    """H(z_target | z_given) of a joint Gaussian with covariance ``cov`` (nats)."""
    s_tt = cov[target][:, target]
    if given:
        s_tg = cov[target][:, given]
        s_gg = cov[given][:, given]
        s_tt = s_tt - s_tg @ torch.linalg.solve(s_gg, s_tg.T)
    return 0.5 * torch.logdet(2 * math.pi * math.e * s_tt)


def gaussian_kl_floor(inverse: Inverse, cov: Tensor, index: Mapping[str, int]) -> float:
    """min over q with ``inverse``'s structure of E_x KL(p(z | x) || q(z | x)) for a joint Gaussian p(x, z) with
    covariance ``cov`` (variables at ``index``): sum_i H(z_i | Pa_i) - H(z | x). Zero exactly when the structure
    is faithful; the best factor is p(z_i | Pa_i), which is linear-Gaussian, so no family does better."""
    obs = [index[v] for v in inverse.observed]
    lat = [index[v] for v in inverse.order]
    total = -gaussian_conditional_entropy(cov, lat, obs)
    for v in inverse.order:
        total = total + gaussian_conditional_entropy(cov, [index[v]], [index[p] for p in inverse.parents[v]])
    return float(total)

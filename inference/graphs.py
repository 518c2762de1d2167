"""Bayesian-network structure: DAGs, moralisation, d-separation, and the checks a stochastic inverse must pass.

Seed 003 Ch 3 (Webb et al., NeurIPS 2018, "Faithful inversion of generative models"; extraction
``../shared/research/seed003.md`` §2.1): a stochastic inverse of p(x | z) p(z) with structure G is a factorisation of
q(z | x) over a DAG H.

- Def. 1 (faithful / I-map): every independence H asserts holds in G. ``is_faithful`` checks it through the ordered
  Markov property of H -- each latent, given its H-parents, is d-separated in G from everything sampled before it
  (the observed variables and the earlier latents). The ordered Markov statements generate I(H) under the
  semi-graphoid axioms, which d-separation in G satisfies, so checking them is enough (Pearl 1988; not in the seed).
  Only q(z | x) is checked: the observed variables come first and nothing is assumed about q(x).
- Def. 2 (minimal): removing any single edge breaks faithfulness (``redundant_edges`` lists the edges that do not).
- Def. 3 (natural): no latent-to-latent edge of H points from a variable to one of its G-descendants (the order of
  random choices is reversed), or none points to one of its G-ancestors (the order is kept). Edges from observed
  variables are left out of this test: a reverse-order inverse conditions every latent on the data, whose ancestor
  it is, and the seed's own reverse-NaMI GMM example (q(theta | x, phi)) has such edges.

d-separation is the reachability ("Bayes ball") procedure of Koller & Friedman, Alg. 3.1 (not in the seed).
Pure Python; graphs are small (tens to a few hundred nodes).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

__all__ = ["BayesNet", "Inverse", "moralise", "d_separated", "is_faithful", "redundant_edges", "is_minimal",
           "naturalness"]


@dataclass(frozen=True)
class BayesNet:
    """A DAG given as ``parents[node] = (parent, ...)`` (every node a key, in a fixed order) and its observed nodes.

    Construction checks that parents are nodes and that there is no cycle (``ValueError`` naming the cycle)."""
    parents: Mapping[str, tuple[str, ...]]
    observed: frozenset[str] = frozenset()
    children: Mapping[str, tuple[str, ...]] = field(init=False, repr=False)

    def __post_init__(self):
        parents = {str(v): tuple(str(p) for p in ps) for v, ps in self.parents.items()}
        for v, ps in parents.items():
            for p in ps:
                if p not in parents:
                    raise ValueError(f"{v!r} has parent {p!r}, which is not a node of the graph; list every node "
                                     f"as a key of `parents` (with () for a root)")
            if len(set(ps)) != len(ps):
                raise ValueError(f"{v!r} lists a parent twice: {ps}")
        unknown = set(self.observed) - set(parents)
        if unknown:
            raise ValueError(f"observed nodes {sorted(unknown)} are not nodes of the graph")
        children: dict[str, list[str]] = {v: [] for v in parents}
        for v, ps in parents.items():
            for p in ps:
                children[p].append(v)
        object.__setattr__(self, "parents", parents)
        object.__setattr__(self, "observed", frozenset(self.observed))
        object.__setattr__(self, "children", {v: tuple(c) for v, c in children.items()})
        self._check_acyclic()

    @classmethod
    def from_edges(cls, edges: Iterable[tuple[str, str]], observed: Iterable[str] = (),
                   nodes: Iterable[str] = ()) -> "BayesNet":
        """From ``(parent, child)`` pairs; ``nodes`` fixes the order (and adds isolated nodes)."""
        parents: dict[str, list[str]] = {v: [] for v in nodes}
        for a, b in edges:
            parents.setdefault(a, [])
            parents.setdefault(b, []).append(a)
        return cls({v: tuple(ps) for v, ps in parents.items()}, frozenset(observed))

    def _check_acyclic(self) -> None:
        state: dict[str, int] = {}          # 1: on the current path, 2: done
        for root in self.parents:
            if root in state:
                continue
            stack = [(root, iter(self.children[root]))]
            state[root] = 1
            path = [root]
            while stack:
                v, it = stack[-1]
                c = next(it, None)
                if c is None:
                    state[v] = 2
                    stack.pop()
                    path.pop()
                elif state.get(c) == 1:
                    cycle = path[path.index(c):] + [c]
                    raise ValueError("the graph has a cycle: " + " -> ".join(cycle) + "; a Bayesian network must "
                                     "be acyclic")
                elif c not in state:
                    state[c] = 1
                    stack.append((c, iter(self.children[c])))
                    path.append(c)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self.parents)

    @property
    def latents(self) -> tuple[str, ...]:
        return tuple(v for v in self.parents if v not in self.observed)

    def topological_order(self) -> tuple[str, ...]:
        """Kahn's algorithm, ties broken by node order (deterministic)."""
        index = {v: i for i, v in enumerate(self.parents)}
        waiting = {v: len(ps) for v, ps in self.parents.items()}
        ready = sorted((v for v, n in waiting.items() if n == 0), key=index.get)
        order = []
        while ready:
            v = ready.pop(0)
            order.append(v)
            for c in self.children[v]:
                waiting[c] -= 1
                if waiting[c] == 0:
                    ready.append(c)
                    ready.sort(key=index.get)
        return tuple(order)

    def descendants(self, v: str) -> set[str]:
        seen, stack = set(), list(self.children[v])
        while stack:
            u = stack.pop()
            if u not in seen:
                seen.add(u)
                stack.extend(self.children[u])
        return seen

    def ancestors(self, vs: Iterable[str]) -> set[str]:
        seen, stack = set(), list(vs)
        while stack:
            u = stack.pop()
            for p in self.parents[u]:
                if p not in seen:
                    seen.add(p)
                    stack.append(p)
        return seen


@dataclass(frozen=True)
class Inverse:
    """A stochastic inverse q(z | x) = prod_i q(z_order[i] | parents[z_order[i]]): a sampling order over the latents
    and, for each, parents drawn from the observed variables and the latents before it."""
    order: tuple[str, ...]
    parents: Mapping[str, tuple[str, ...]]
    observed: tuple[str, ...]

    def __post_init__(self):
        if set(self.parents) != set(self.order) or len(set(self.order)) != len(self.order):
            raise ValueError("an inverse needs exactly one parent set per latent, and each latent once in the order")
        before = set(self.observed)
        for v in self.order:
            bad = [p for p in self.parents[v] if p not in before]
            if bad:
                raise ValueError(f"q({v} | ...) conditions on {bad}, which are neither observed nor sampled before "
                                 f"{v}")
            before.add(v)

    @property
    def num_edges(self) -> int:
        return sum(len(ps) for ps in self.parents.values())

    def latent_edges(self) -> list[tuple[str, str]]:
        obs = set(self.observed)
        return [(p, v) for v in self.order for p in self.parents[v] if p not in obs]

    def factors(self) -> str:
        """The factorisation as text, e.g. ``q(L | H, J) q(G | L, H, J)``."""
        return " ".join(f"q({v} | {', '.join(self.parents[v])})" if self.parents[v] else f"q({v})"
                        for v in self.order)

    def with_extra_edges(self, edges: Iterable[tuple[str, str]]) -> "Inverse":
        parents = {v: list(ps) for v, ps in self.parents.items()}
        for p, v in edges:
            if p in parents[v]:
                raise ValueError(f"{p} -> {v} is already an edge of the inverse")
            parents[v].append(p)
        return Inverse(self.order, {v: tuple(ps) for v, ps in parents.items()}, self.observed)


def moralise(bn: BayesNet) -> dict[str, set[str]]:
    """The moral graph: edge directions dropped and every pair of co-parents of a common child joined."""
    adj: dict[str, set[str]] = {v: set() for v in bn.nodes}
    for v, ps in bn.parents.items():
        for p in ps:
            adj[v].add(p)
            adj[p].add(v)
        for i, a in enumerate(ps):
            for b in ps[i + 1:]:
                adj[a].add(b)
                adj[b].add(a)
    return adj


def _reachable(bn: BayesNet, sources: set[str], given: set[str]) -> set[str]:
    """Nodes joined to ``sources`` by an active trail given ``given`` (Koller & Friedman Alg. 3.1)."""
    ancestors_of_given = bn.ancestors(given) | given
    visited: set[tuple[str, bool]] = set()      # (node, arrived travelling up from a child)
    stack = [(s, True) for s in sources]
    reachable: set[str] = set()
    while stack:
        v, up = stack.pop()
        if (v, up) in visited:
            continue
        visited.add((v, up))
        if v not in given:
            reachable.add(v)
        if up and v not in given:               # from a child: go on to parents and to children
            stack.extend((p, True) for p in bn.parents[v])
            stack.extend((c, False) for c in bn.children[v])
        elif not up:                            # from a parent
            if v not in given:                  # chain: on to children
                stack.extend((c, False) for c in bn.children[v])
            if v in ancestors_of_given:         # collider (or an ancestor of one) observed: back up to parents
                stack.extend((p, True) for p in bn.parents[v])
    return reachable


def d_separated(bn: BayesNet, xs: Iterable[str], ys: Iterable[str], given: Iterable[str] = ()) -> bool:
    """True when every trail between ``xs`` and ``ys`` is blocked by ``given`` in ``bn``."""
    xs, ys, given = set(xs), set(ys), set(given)
    for name, group in (("xs", xs), ("ys", ys), ("given", given)):
        unknown = group - set(bn.parents)
        if unknown:
            raise ValueError(f"{name} names nodes not in the graph: {sorted(unknown)}")
    if not xs or not ys:
        return True
    if xs & given or ys & given:
        raise ValueError("xs and ys must not overlap with the conditioning set")
    return not (_reachable(bn, xs, given) & ys)


def _check_inverse_of(inverse: Inverse, bn: BayesNet) -> None:
    if set(inverse.order) != set(bn.latents) or set(inverse.observed) != set(bn.observed):
        raise ValueError("the inverse does not cover the network's latent and observed variables")


def _unexplained(inverse: Inverse, bn: BayesNet, v: str, parents: set[str], before: set[str]) -> bool:
    rest = before - parents
    return bool(rest) and not d_separated(bn, {v}, rest, parents)


def is_faithful(inverse: Inverse, bn: BayesNet) -> bool:
    """Def. 1: each latent is d-separated in ``bn`` from what comes before it in ``inverse`` given its parents."""
    _check_inverse_of(inverse, bn)
    before = set(inverse.observed)
    for v in inverse.order:
        if _unexplained(inverse, bn, v, set(inverse.parents[v]), before):
            return False
        before.add(v)
    return True


def redundant_edges(inverse: Inverse, bn: BayesNet) -> list[tuple[str, str]]:
    """Edges ``(parent, latent)`` of a faithful inverse whose removal keeps it faithful (empty: Def. 2 holds)."""
    _check_inverse_of(inverse, bn)
    redundant, before = [], set(inverse.observed)
    for v in inverse.order:
        parents = set(inverse.parents[v])
        for p in inverse.parents[v]:
            if not _unexplained(inverse, bn, v, parents - {p}, before):
                redundant.append((p, v))
        before.add(v)
    return redundant


def is_minimal(inverse: Inverse, bn: BayesNet) -> bool:
    """Def. 2: faithful, and no single edge can go."""
    return is_faithful(inverse, bn) and not redundant_edges(inverse, bn)


def naturalness(inverse: Inverse, bn: BayesNet) -> str | None:
    """Def. 3 over latent-to-latent edges: ``"reversed"`` (no edge into a G-descendant), ``"kept"`` (none into a
    G-ancestor), ``"both"`` (no latent edges), or None (not natural)."""
    _check_inverse_of(inverse, bn)
    edges = inverse.latent_edges()
    into_descendant = any(v in bn.descendants(p) for p, v in edges)
    into_ancestor = any(p in bn.descendants(v) for p, v in edges)
    if not into_descendant and not into_ancestor:
        return "both"
    if not into_descendant:
        return "reversed"
    if not into_ancestor:
        return "kept"
    return None

"""Retrace targets against brute-force sums (seed 000 Alg 9 with the standard Retrace form, agents/retrace.py)."""
import torch

from agents.retrace import retrace_targets, truncated_importance_weights

GAMMA = 0.9


def random_batch(B=7, K=6, seed=0, terminal_prob=0.2):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, K + 1, (B,), generator=g)
    mask = (torch.arange(K)[None] < lengths[:, None]).float()
    discounts = (torch.rand(B, K, generator=g) > terminal_prob).float()
    # a terminal ends the stored sequence: nothing is stored after it
    for b in range(B):
        for t in range(int(lengths[b])):
            if discounts[b, t] == 0:
                mask[b, t + 1:] = 0
                break
    discounts = discounts * mask
    rand = lambda: torch.randn(B, K, generator=g)  # noqa: E731
    return dict(rewards=rand() * mask, discounts=discounts, mask=mask, q_taken=rand(), v_next=rand(),
                c=torch.rand(B, K, generator=g))


def brute_force(rewards, discounts, mask, q_taken, v_next, c, gamma):
    """Q^R_t = Q_t + sum_{j>=t} (prod_{i=t}^{j-1} gamma d_i c_{i+1}) (r_j + gamma d_j V_{j+1} - Q_j)."""
    B, K = rewards.shape
    out = torch.zeros(B, K)
    for b in range(B):
        L = int(mask[b].sum())
        for t in range(L):
            total, weight = q_taken[b, t].item(), 1.0
            for j in range(t, L):
                if j > t:
                    weight *= gamma * discounts[b, j - 1].item() * c[b, j].item()
                delta = rewards[b, j] + gamma * discounts[b, j] * v_next[b, j] - q_taken[b, j]
                total += weight * delta.item()
            out[b, t] = total
    return out


def test_matches_explicit_sum_with_terminals_and_truncations():
    for seed in range(5):
        batch = random_batch(seed=seed)
        expected = brute_force(**batch, gamma=GAMMA)
        got = retrace_targets(**batch, gamma=GAMMA)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert torch.all(got[batch["mask"] == 0] == 0)


def test_lambda_zero_is_one_step_expected_sarsa():
    batch = random_batch(seed=3)
    batch["c"] = truncated_importance_weights(torch.randn(7, 6), lam=0.0)
    got = retrace_targets(**batch, gamma=GAMMA)
    expected = (batch["rewards"] + GAMMA * batch["discounts"] * batch["v_next"]) * batch["mask"]
    torch.testing.assert_close(got, expected)


def test_on_policy_lambda_one_is_discounted_return_plus_bootstrap():
    """With c = 1 and E_pi Q(s_j) = Q(s_j, a_j) (e.g. a deterministic policy) the corrections telescope away."""
    B, K = 4, 5
    g = torch.Generator().manual_seed(1)
    rewards = torch.randn(B, K, generator=g)
    q = torch.randn(B, K + 1, generator=g)  # Q(s_t, a_t) for t = 0..K, and V = Q on-policy
    mask, discounts, c = torch.ones(B, K), torch.ones(B, K), torch.ones(B, K)
    got = retrace_targets(rewards, discounts, mask, q[:, :K], q[:, 1:], c, GAMMA)
    for t in range(K):
        ret = sum(GAMMA ** (j - t) * rewards[:, j] for j in range(t, K)) + GAMMA ** (K - t) * q[:, K]
        torch.testing.assert_close(got[:, t], ret)
    # a terminal at step 2 cuts the return there: no bootstrap beyond it
    discounts[:, 2] = 0
    mask[:, 3:] = 0
    got = retrace_targets(rewards * mask, discounts * mask, mask, q[:, :K], q[:, 1:], c, GAMMA)
    torch.testing.assert_close(got[:, 0], rewards[:, 0] + GAMMA * rewards[:, 1] + GAMMA**2 * rewards[:, 2])


def test_truncated_importance_weights_never_exceed_lambda():
    log_ratio = torch.linspace(-10, 10, 101)
    for lam in (0.0, 0.5, 0.95, 1.0):
        c = truncated_importance_weights(log_ratio, lam)
        assert torch.all(c <= lam + 1e-7) and torch.all(c >= 0)
        torch.testing.assert_close(c, lam * torch.minimum(torch.ones(()), log_ratio.exp()))

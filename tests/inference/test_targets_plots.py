import pytest
import torch

from inference import plots, targets


def test_one_line_plots_write_pngs(tmp_path):
    t = targets.mog2()
    x = t.sample(200, torch.Generator().manual_seed(0))
    plots.plot_samples(x, t, str(tmp_path / "s.png"))
    plots.plot_samples([x, x[:50]], t, str(tmp_path / "two.png"), titles=["a", "b"])
    plots.plot_trace(x.reshape(4, 50, 2), str(tmp_path / "t.png"))
    plots.plot_curves({"a": ([1, 2], [3, 4])}, str(tmp_path / "c.png"), logx=True)
    for name in ["s", "two", "t", "c"]:
        data = (tmp_path / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_plot_input_errors():
    with pytest.raises(ValueError, match="2-D points"):
        plots.plot_samples(torch.zeros(5, 3))
    with pytest.raises(ValueError, match="chains, draws, d"):
        plots.plot_trace(torch.zeros(5, 3))

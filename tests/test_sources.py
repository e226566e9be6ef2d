"""MODEL and DATA strings -> module and data (nngauge.nn._sources, nngauge.data._sources)."""

import numpy as np
import pytest
import torch
from torch import nn

from nngauge.data._sources import DataSource, load_data
from nngauge.errors import InvalidInputError, NNGaugeError, UnknownNameError
from nngauge.nn import MLP, mlp
from nngauge.nn._sources import load_model


def _data(n=20, d=6, classes=3):
    gen = torch.Generator().manual_seed(0)
    return DataSource(torch.randn(n, d, generator=gen), torch.arange(n) % classes, "test")


# ------------------------------------------------------------------------------- built-ins


def test_builtin_spec_parses_into_mlp_kwargs_with_data_defaults():
    net = load_model("mlp:depth=4,width=16,activation=leaky_relu(negative_slope=0.2),"
                     "norm=layer,bias_std=0.1,skip=none", data=_data())
    assert isinstance(net, MLP)
    cfg = net.config
    assert (cfg.d_in, cfg.width, cfg.depth, cfg.d_out) == (6, 16, 4, 3)  # d_in, d_out from data
    assert cfg.norm == "layer" and cfg.bias_std == 0.1 and cfg.skip is None
    assert cfg.activation.startswith("leaky_relu")


def test_builtin_is_the_same_network_as_mlp_with_the_seed():
    net = load_model("mlp:d_in=5,width=8,depth=3,d_out=2,activation=tanh", seed=7)
    ref = mlp(5, 8, 3, 2, activation="tanh", generator=torch.Generator().manual_seed(7))
    for a, b in zip(net.parameters(), ref.parameters()):
        assert torch.equal(a, b)


def test_builtin_unknown_key_lists_the_valid_ones():
    with pytest.raises(UnknownNameError) as err:
        load_model("mlp:depht=3", data=_data())
    assert "depht" in str(err.value) and "'depth'" in str(err.value) and "width" in str(err.value)


def test_unknown_builtin_and_bad_values():
    with pytest.raises(UnknownNameError, match="built-in"):
        load_model("transformer:depth=3")
    with pytest.raises(NNGaugeError, match="norm"):
        load_model("mlp:norm=group", data=_data())
    with pytest.raises(InvalidInputError, match="key=value"):
        load_model("mlp:depth", data=_data())
    with pytest.raises(InvalidInputError, match="d_in"):
        load_model("mlp:depth=3")  # no data to take d_in from


# ---------------------------------------------------------------------------- python files


def test_python_file_function(tmp_path):
    path = tmp_path / "net.py"
    path.write_text("import torch\ndef build():\n    return torch.nn.Linear(3, 2)\n")
    net = load_model(f"{path}:build")
    assert isinstance(net, nn.Linear) and net.in_features == 3


@pytest.mark.parametrize("source, function, match", [
    ("raise RuntimeError('broken import')\n", "build", "broken import"),
    ("def build():\n    raise ValueError('broken build')\n", "build", "broken build"),
    ("def build():\n    return 3\n", "build", "nn.Module"),
    ("def build():\n    return None\n", "other", "other"),
])
def test_python_file_errors(tmp_path, source, function, match):
    path = tmp_path / "net.py"
    path.write_text(source)
    with pytest.raises(NNGaugeError, match=match):
        load_model(f"{path}:{function}")


def test_python_file_missing(tmp_path):
    with pytest.raises(InvalidInputError, match="not found"):
        load_model(f"{tmp_path / 'nope.py'}:build")
    with pytest.raises(InvalidInputError, match="function"):
        load_model(str(tmp_path / "nope.py"))


# ---------------------------------------------------------------------------- saved modules


def _small():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def test_torchscript_and_export_round_trip(tmp_path):
    net = _small()
    x = torch.randn(5, 4)
    torch.jit.save(torch.jit.trace(net, x), tmp_path / "m.pt")
    exported = torch.export.export(net, (x,))
    torch.export.save(exported, tmp_path / "m.pt2")
    for name in ("m.pt", "m.pt2"):
        loaded = load_model(str(tmp_path / name))
        torch.testing.assert_close(loaded(x), net(x))


def test_pickled_module_needs_trust(tmp_path):
    net = _small()
    torch.save(net, tmp_path / "full.pt")
    with pytest.raises(InvalidInputError, match="--trust-pickle"):
        load_model(str(tmp_path / "full.pt"))
    loaded = load_model(str(tmp_path / "full.pt"), trust_pickle=True)
    x = torch.randn(3, 4)
    torch.testing.assert_close(loaded(x), net(x))


class _Marker:
    """Unpickling this creates the file ``path`` (standing for any code a pickle can run)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _tampered_export(tmp_path, how: str):
    """A real .pt2 of a small network, rewritten the way a malicious file would be: a weight
    marked use_pickle whose payload is a code-running pickle ("weights"), sample inputs that
    are such a pickle ("sample_inputs"), or an opaque constant ("constant")."""
    import json
    import zipfile

    clean = tmp_path / "clean.pt2"
    torch.export.save(torch.export.export(_small(), (torch.randn(2, 4),)), clean)
    marker = tmp_path / f"marker-{how}"
    torch.save(_Marker(marker), tmp_path / "evil.pkl")
    evil = (tmp_path / "evil.pkl").read_bytes()
    out = tmp_path / f"{how}.pt2"
    with zipfile.ZipFile(clean) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if how == "weights" and name.endswith("model_weights_config.json"):
                config = json.loads(data)
                first = next(iter(config["config"]))
                config["config"][first]["use_pickle"] = True
                weight_file = config["config"][first]["path_name"]
                data = json.dumps(config).encode()
            if how == "sample_inputs" and "/sample_inputs/" in name:
                data = evil
            if how == "constant" and name.endswith("model_constants_config.json"):
                config = json.loads(data)
                config.setdefault("config", {})["evil"] = {
                    "path_name": "opaque_obj_0", "use_pickle": True, "tensor_meta": None}
                data = json.dumps(config).encode()
            dst.writestr(name, data)
        if how == "weights":
            prefix = next(n for n in src.namelist() if n.endswith("model_weights_config.json"))
            dst.writestr(prefix.rsplit("/", 1)[0] + "/" + weight_file + "_evil", evil)
    if how == "weights":  # the marked weight's own file holds the pickle
        with zipfile.ZipFile(out) as src:
            items = {n: src.read(n) for n in src.namelist()}
        stem = next(n for n in items if n.endswith("_evil"))
        items[stem[:-len("_evil")]] = items.pop(stem)
        with zipfile.ZipFile(out, "w") as dst:
            for name, data in items.items():
                dst.writestr(name, data)
    return out, marker


@pytest.mark.parametrize("how", ["weights", "sample_inputs", "constant"])
def test_export_archives_that_unpickle_are_refused_and_run_no_code(tmp_path, how):
    path, marker = _tampered_export(tmp_path, how)
    with pytest.raises(InvalidInputError, match="--trust-pickle"):
        load_model(str(path))
    assert not marker.exists()


def test_trusting_a_tampered_export_does_unpickle_it(tmp_path):
    """The marker file is a real detector: with trust_pickle=True the code runs."""
    path, marker = _tampered_export(tmp_path, "sample_inputs")
    try:
        load_model(str(path), trust_pickle=True)
    except InvalidInputError:
        pass  # the payload is no sample input; what matters is that it was unpickled
    assert marker.exists()


def test_cli_report_refuses_a_tampered_export_without_trust(tmp_path):
    import subprocess
    import sys

    path, marker = _tampered_export(tmp_path, "weights")
    done = subprocess.run([sys.executable, "-m", "nngauge", "report", str(path), "--data",
                           "gaussian:shape=4,n=16", "--quick", "--out",
                           str(tmp_path / "r.html")], capture_output=True, text=True)
    assert done.returncode != 0 and "--trust-pickle" in done.stdout + done.stderr
    assert not marker.exists() and not (tmp_path / "r.html").exists()


def test_state_dict_is_not_a_model(tmp_path):
    torch.save(_small().state_dict(), tmp_path / "weights.pt")
    with pytest.raises(InvalidInputError, match="file.py:function"):
        load_model(str(tmp_path / "weights.pt"))
    with pytest.raises(InvalidInputError, match="not found"):
        load_model(str(tmp_path / "missing.pt"))


# ------------------------------------------------------------------------------------- data


def test_data_files(tmp_path):
    x = np.random.default_rng(0).standard_normal((10, 3))
    y = np.arange(10) % 4
    np.savez(tmp_path / "a.npz", X=x, y=y)
    torch.save({"inputs": torch.as_tensor(x), "labels": torch.as_tensor(y)}, tmp_path / "b.pt")
    torch.save((torch.as_tensor(x), torch.as_tensor(y)), tmp_path / "c.pt")
    torch.save(torch.as_tensor(x), tmp_path / "d.pt")
    for name in ("a.npz", "b.pt", "c.pt", "d.pt"):
        src = load_data(str(tmp_path / name))
        np.testing.assert_allclose(src.inputs.numpy(), x.astype(np.float32))
        assert src.inputs.dtype == torch.float32
        if name != "d.pt":
            assert src.n_classes == 4 and src.labels.tolist() == y.tolist()
        else:
            assert src.labels is None and src.as_pair() is src.inputs
    assert len(load_data(str(tmp_path / "a.npz"), n=4).inputs) == 4


def test_data_file_errors(tmp_path):
    np.savez(tmp_path / "bad.npz", features=np.ones((4, 2)))
    with pytest.raises(InvalidInputError, match="inputs"):
        load_data(str(tmp_path / "bad.npz"))
    np.savez(tmp_path / "len.npz", x=np.ones((4, 2)), y=np.arange(3))
    with pytest.raises(InvalidInputError, match="one label per sample"):
        load_data(str(tmp_path / "len.npz"))
    with pytest.raises(InvalidInputError, match="not found"):
        load_data(str(tmp_path / "none.npz"))


def test_named_data_sets_and_seeds():
    wave = load_data("waveform", n=50, seed=1)
    assert tuple(wave.inputs.shape) == (50, 40) and wave.n_classes <= 3
    assert torch.equal(wave.inputs, load_data("waveform", n=50, seed=1).inputs)
    assert not torch.equal(wave.inputs, load_data("waveform", n=50, seed=2).inputs)
    gauss = load_data("gaussian:d=7,n=30", seed=3)
    assert tuple(gauss.inputs.shape) == (30, 7)
    digits = load_data("digits", n=100)
    assert tuple(digits.inputs.shape) == (100, 64)


def test_named_data_errors():
    with pytest.raises(UnknownNameError, match="waveform"):
        load_data("cifar10")
    with pytest.raises(InvalidInputError, match="d="):
        load_data("gaussian:n=10")
    with pytest.raises(UnknownNameError, match="width"):
        load_data("gaussian:d=3,width=4")

"""The ecosystem's model names (``timm:``, ``torchvision:``, ``hf:``) and ``--weights`` in the
MODEL string (nngauge.nn._ecosystem, nngauge.nn._sources).

The real packages are tested where they are installed (``pytest.importorskip``, the reason
giving the install command); where they are not (CI), their install messages are tested by
hiding the package (``sys.modules[name] = None``), and the calls nngauge makes are checked on
stand-in packages that record them."""

import argparse
import os
import socket
import sys
import types

import pytest
import torch
from torch import nn

from nngauge.errors import InvalidInputError, MissingDependencyError, NNGaugeError, UnknownNameError
from nngauge.nn._sources import load_model

INSTALL = {"timm": "pip install 'nngauge[timm]'", "transformers": "pip install 'nngauge[hf]'",
           "safetensors": "pip install 'nngauge[safetensors]'",
           "torchvision": "pip install torchvision"}


def _params(net):
    return [p.detach().clone() for p in net.parameters()]


def _same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt is recorded and fails."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network blocked by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


# ----------------------------------------------------------------- missing packages (any venv)


def _hf_folder(path, config="{}"):
    path.mkdir()
    (path / "config.json").write_text(config)
    return path


@pytest.mark.parametrize("package, spec", [
    ("timm", "timm:resnet18"), ("torchvision", "torchvision:resnet18"),
    ("transformers", "hf:{folder}"), ("safetensors", "mlp:d_in=3,d_out=2,depth=2,width=4")])
def test_a_missing_package_names_its_install_command(tmp_path, monkeypatch, package, spec):
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)  # import package -> ModuleNotFoundError
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"not read")
    folder = _hf_folder(tmp_path / "saved")
    with pytest.raises(MissingDependencyError) as err:
        load_model(spec.format(folder=folder),
                   weights=weights if package == "safetensors" else None)
    message = str(err.value)
    assert f"'{package}', which is not installed" in message and INSTALL[package] in message
    assert "\n" not in message


def test_an_installed_package_missing_its_own_dependency_names_that_one(tmp_path, monkeypatch):
    """timm imports torchvision: a timm without it is not "timm not installed"."""
    (tmp_path / "timm").mkdir()
    (tmp_path / "timm" / "__init__.py").write_text("import nngauge_absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "timm", raising=False)
    with pytest.raises(MissingDependencyError) as err:
        load_model("timm:resnet18")
    assert "'timm', which is installed" in str(err.value)
    assert "pip install nngauge_absent_dependency" in str(err.value)


# ------------------------------------------------- the calls made, on stand-in packages (CI)


@pytest.fixture
def fake_timm(monkeypatch):
    calls = []

    def create_model(name, pretrained=False, **options):
        calls.append((name, pretrained, options,
                      {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}))
        return nn.Linear(3, options.get("num_classes", 1000))

    names = ["resnet18", "resnet50", "vit_tiny_patch16_224"]
    monkeypatch.setitem(sys.modules, "timm", types.SimpleNamespace(
        create_model=create_model, is_model=names.__contains__, list_models=lambda: names))
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(key, raising=False)
    return calls


def test_timm_builds_unpretrained_with_the_options_offline_and_seeded(fake_timm):
    state = torch.get_rng_state()
    net = load_model("timm:resnet18:num_classes=10,drop_rate=0.1,class_token=false,"
                     "global_pool=avg", seed=3)
    assert isinstance(net, nn.Linear) and net.out_features == 10
    assert fake_timm[-1][:3] == ("resnet18", False, {"num_classes": 10, "drop_rate": 0.1,
                                                     "class_token": False, "global_pool": "avg"})
    assert fake_timm[-1][3] == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    assert "HF_HUB_OFFLINE" not in os.environ  # the switches are put back as they were
    assert torch.equal(torch.get_rng_state(), state)  # the caller's random state is untouched
    again, other = (load_model("timm:resnet18:num_classes=10", seed=s) for s in (3, 4))
    assert _same(_params(net), _params(again)) and not _same(_params(net), _params(other))


@pytest.mark.parametrize("spec, error, match", [
    ("timm:resnet_50", UnknownNameError, r"did you mean \['resnet50'"),
    ("timm:resnet18:pretrained=true", InvalidInputError, "never downloads"),
    ("timm:resnet18:checkpoint_path=w.pth", InvalidInputError, "--weights"),
    ("timm:hf-hub:timm/resnet18.a1_in1k", InvalidInputError, "never downloads"),
    ("timm:", InvalidInputError, "timm:NAME"),
    ("timm:resnet18:num_classes", InvalidInputError, "key=value"),
])
def test_timm_refusals(fake_timm, spec, error, match):
    with pytest.raises(error, match=match):
        load_model(spec)
    assert not fake_timm  # refused before building anything


def test_a_builder_error_is_one_line_naming_the_call(monkeypatch, fake_timm):
    def broken(name, pretrained=False, **options):
        raise TypeError(f"__init__() got an unexpected keyword argument {next(iter(options))!r}")

    monkeypatch.setattr(sys.modules["timm"], "create_model", broken)
    with pytest.raises(NNGaugeError, match="timm.create_model raised TypeError.*'depht'"):
        load_model("timm:resnet18:depht=3")


@pytest.fixture
def fake_torchvision(monkeypatch):
    calls = []

    def resnet18(*, weights=None, progress=True, **kwargs):
        return nn.Linear(3, kwargs.get("num_classes", 1000))

    def fasterrcnn(*, weights=None, progress=True, weights_backbone="IMAGENET1K_V1", **kwargs):
        return nn.Linear(3, 2)

    builders = {"resnet18": resnet18, "fasterrcnn_resnet50_fpn": fasterrcnn}

    def get_model(name, **config):
        calls.append((name, config))
        return builders[name](**config)

    models = types.SimpleNamespace(list_models=lambda: sorted(builders), get_model=get_model,
                                   get_model_builder=builders.__getitem__)
    monkeypatch.setitem(sys.modules, "torchvision", types.SimpleNamespace(models=models))
    monkeypatch.setitem(sys.modules, "torchvision.models", models)
    return calls


def test_torchvision_builds_without_weights(fake_torchvision):
    net = load_model("torchvision:resnet18:num_classes=7")
    assert net.out_features == 7
    assert fake_torchvision[-1] == ("resnet18", {"weights": None, "num_classes": 7})
    load_model("torchvision:fasterrcnn_resnet50_fpn")  # its backbone's default would download
    assert fake_torchvision[-1] == ("fasterrcnn_resnet50_fpn",
                                    {"weights": None, "weights_backbone": None})
    with pytest.raises(UnknownNameError, match="resnet18"):
        load_model("torchvision:resnet81")
    with pytest.raises(InvalidInputError, match="never downloads"):
        load_model("torchvision:resnet18:weights=DEFAULT")


def test_hf_refuses_a_hub_name_and_folders_it_cannot_read(tmp_path):
    for spec, match in (("hf:gpt2", "not a folder"), ("hf:", "not a folder"),
                        (f"hf:{tmp_path}", "no config.json")):
        with pytest.raises(InvalidInputError, match=match) as err:
            load_model(spec)
        assert "never downloads" in str(err.value) or "save_pretrained" in str(err.value)
    folder = _hf_folder(tmp_path / "old")
    torch.save({"w": torch.ones(2)}, folder / "pytorch_model.bin")
    with pytest.raises(InvalidInputError, match="--weights .*pytorch_model.bin"):
        load_model(f"hf:{folder}")


# ------------------------------------------------------------------------------- --weights


def _mlp(seed):
    return load_model("mlp:d_in=4,width=8,depth=3,d_out=2,activation=tanh", seed=seed)


SPEC = "mlp:d_in=4,width=8,depth=3,d_out=2,activation=tanh"


def _save(state, path):
    if path.suffix == ".safetensors":
        pytest.importorskip("safetensors", reason=INSTALL["safetensors"])
        from safetensors.torch import save_file

        save_file(state, str(path))
    else:
        torch.save(state, path)


@pytest.mark.parametrize("name", ["w.safetensors", "w.pt", "w.bin"])
def test_weights_load_into_the_model(tmp_path, name):
    trained = _mlp(seed=1)
    _save(trained.state_dict(), tmp_path / name)
    net = load_model(SPEC, seed=0, weights=tmp_path / name)
    assert _same(_params(net), _params(trained))
    assert not _same(_params(_mlp(seed=0)), _params(trained))  # the weights did the work


def test_a_checkpoint_holding_the_state_dict_under_a_key_loads(tmp_path):
    trained = _mlp(seed=1)
    torch.save({"epoch": 3, "model_state_dict": trained.state_dict()}, tmp_path / "ck.pth")
    assert _same(_params(load_model(SPEC, weights=tmp_path / "ck.pth")), _params(trained))
    torch.save({"epoch": 3}, tmp_path / "none.pt")
    with pytest.raises(InvalidInputError, match=r"state dict.*keys \['epoch'\]"):
        load_model(SPEC, weights=tmp_path / "none.pt")


def test_a_pickle_needing_code_is_refused_without_trust_and_loads_with_it(tmp_path):
    """The one rule for pickles (MODEL files and --weights alike): torch's weights_only
    unpickler runs no code; what needs more (here an argparse.Namespace, as training scripts
    save their arguments) loads only with trust_pickle."""
    trained = _mlp(seed=1)
    torch.save({"state_dict": trained.state_dict(), "args": argparse.Namespace(lr=0.1)},
               tmp_path / "ck.pt")
    with pytest.raises(InvalidInputError, match="needs code to load.*--trust-pickle.*arbitrary"):
        load_model(SPEC, weights=tmp_path / "ck.pt")
    net = load_model(SPEC, weights=tmp_path / "ck.pt", trust_pickle=True)
    assert _same(_params(net), _params(trained))


def test_mismatched_weights_list_missing_unexpected_and_shapes(tmp_path):
    state = _mlp(seed=1).state_dict()
    first = next(iter(state))
    state["extra.weight"] = torch.zeros(1)
    last = list(state)[-2]
    state[last] = torch.zeros(5)
    del state[first]
    torch.save(state, tmp_path / "w.pt")
    with pytest.raises(InvalidInputError) as err:
        load_model(SPEC, weights=tmp_path / "w.pt")
    message = str(err.value)
    assert f"1 missing ['{first}']" in message and "1 unexpected ['extra.weight']" in message
    assert f"{last} (5,) in the file" in message and "\n" not in message


def test_a_wrapper_prefix_is_named(tmp_path):
    torch.save({f"module.{k}": v for k, v in _mlp(seed=1).state_dict().items()},
               tmp_path / "w.pt")
    with pytest.raises(InvalidInputError, match="prefix 'module.'"):
        load_model(SPEC, weights=tmp_path / "w.pt")


TIED = '''
import torch


class Tied(torch.nn.Module):
    """A language model's embedding and output head sharing one matrix (or not)."""

    def __init__(self, tie):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        if tie:
            self.head.weight = self.embed.weight


def tied():
    return Tied(True)


def untied():
    return Tied(False)
'''


def test_tied_weights_stored_once_load(tmp_path):
    (tmp_path / "net.py").write_text(TIED)
    embedding = torch.randn(10, 4)
    torch.save({"embed.weight": embedding}, tmp_path / "w.pt")
    net = load_model(f"{tmp_path / 'net.py'}:tied", weights=tmp_path / "w.pt")
    assert torch.equal(net.embed.weight, embedding) and net.head.weight is net.embed.weight
    with pytest.raises(InvalidInputError, match=r"1 missing \['head.weight'\]"):
        load_model(f"{tmp_path / 'net.py'}:untied", weights=tmp_path / "w.pt")


def test_weights_files_that_are_not_weights(tmp_path):
    with pytest.raises(InvalidInputError, match="not found"):
        load_model(SPEC, weights=tmp_path / "absent.safetensors")
    (tmp_path / "w.npz").write_bytes(b"")
    with pytest.raises(InvalidInputError, match=r"\.safetensors file or a torch.save"):
        load_model(SPEC, weights=tmp_path / "w.npz")
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(InvalidInputError, match="loadable torch.save file"):
        load_model(SPEC, weights=tmp_path / "junk.pt", trust_pickle=True)
    with pytest.raises(InvalidInputError, match="--weights"):
        load_model(str(tmp_path / "w.safetensors"))  # weights alone are no MODEL


class _Built(Exception):
    """Raised by the stand-in report builder with the module the command built."""


@pytest.mark.parametrize("name", ["w.safetensors", "w.pt"])
def test_cli_report_passes_weights_to_the_model(tmp_path, monkeypatch, name):
    import nngauge.report
    from nngauge.cli import main

    def built(module, *args, **kwargs):
        raise _Built(module)

    trained = _mlp(seed=1)
    _save(trained.state_dict(), tmp_path / name)
    monkeypatch.setattr(nngauge.report, "build_report", built)
    with pytest.raises(_Built) as caught:
        main(["report", SPEC, "--data", "gaussian:d=4,n=8", "--weights", str(tmp_path / name),
              "--out", str(tmp_path / "r.html")])
    assert _same(_params(caught.value.args[0]), _params(trained))


def test_cli_refuses_a_pickle_needing_code_without_trust(tmp_path, capsys):
    from nngauge.cli import main

    torch.save({"state_dict": _mlp(seed=1).state_dict(), "args": argparse.Namespace(lr=0.1)},
               tmp_path / "ck.pt")
    with pytest.raises(SystemExit) as status:
        main(["report", SPEC, "--data", "gaussian:d=4,n=8", "--weights", str(tmp_path / "ck.pt"),
              "--out", str(tmp_path / "r.html")])
    assert status.value.code == 2 and "--trust-pickle" in capsys.readouterr().err
    assert not (tmp_path / "r.html").exists()


# ---------------------------------------------------------- the real packages, where installed


def test_real_timm_resnet_and_vit():
    timm = pytest.importorskip("timm", reason=INSTALL["timm"] + " (and torchvision)")
    net = load_model("timm:resnet18:num_classes=10", seed=0)
    assert isinstance(net, timm.models.ResNet) and net(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert _same(_params(net), _params(load_model("timm:resnet18:num_classes=10", seed=0)))
    vit = load_model("timm:vit_tiny_patch16_224:img_size=32,num_classes=3")
    assert vit(torch.randn(2, 3, 32, 32)).shape == (2, 3)


def test_real_torchvision_resnet():
    pytest.importorskip("torchvision", reason=INSTALL["torchvision"])
    net = load_model("torchvision:resnet18:num_classes=10", seed=0)
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert _same(_params(net), _params(load_model("torchvision:resnet18:num_classes=10")))


@pytest.fixture
def tiny_gpt2(tmp_path):
    """A 2-layer GPT-2 written by save_pretrained, and the model it was saved from."""
    transformers = pytest.importorskip("transformers", reason=INSTALL["transformers"])
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=16, vocab_size=50,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)
    torch.manual_seed(1)
    saved = transformers.GPT2LMHeadModel(config).eval()
    saved.save_pretrained(tmp_path / "gpt")
    config.save_pretrained(tmp_path / "config_only")
    return tmp_path, saved


def test_real_hf_folder_loads_its_weights_without_the_network(tiny_gpt2, no_network):
    root, saved = tiny_gpt2
    tokens = torch.randint(0, 50, (3, 8))
    net = load_model(f"hf:{root / 'gpt'}")
    assert type(net).__name__ == "GPT2LMHeadModel"
    torch.testing.assert_close(net(tokens).logits, saved(tokens).logits)
    fresh = [load_model(f"hf:{root / 'config_only'}", seed=s) for s in (5, 5, 6)]
    assert _same(_params(fresh[0]), _params(fresh[1]))
    assert not _same(_params(fresh[0]), _params(fresh[2]))
    assert not _same(_params(fresh[0]), _params(saved))  # random: no weights were fetched
    assert not no_network


def test_real_hf_config_with_safetensors_weights(tiny_gpt2, no_network):
    """--weights on a config-only folder: save_pretrained stores GPT-2's tied head once."""
    root, saved = tiny_gpt2
    net = load_model(f"hf:{root / 'config_only'}",
                     weights=root / "gpt" / "model.safetensors").eval()
    tokens = torch.randint(0, 50, (3, 8))
    torch.testing.assert_close(net(tokens).logits, saved(tokens).logits)
    assert not no_network

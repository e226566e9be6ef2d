"""activations.register: names are validated, a taken name (a built-in included) is refused
unless overwrite=True, and what is registered must build an Activation."""

import pytest

from nngauge.activations import _registry, get, modify, names, register
from nngauge.errors import InvalidInputError
from nngauge.nn import mlp


@pytest.fixture(autouse=True)
def restore_registry():
    saved = dict(_registry._FACTORIES)
    yield
    _registry._FACTORIES.clear()
    _registry._FACTORIES.update(saved)


def test_a_builtin_is_not_replaced_silently():
    with pytest.raises(InvalidInputError, match="already registered.*overwrite=True"):
        register("relu")(lambda: get("tanh"))
    assert get("relu").name == "relu"
    assert "relu" in str(mlp(3, 4, 2, 1, activation="relu"))


def test_overwrite_replaces_it_everywhere():
    register("relu", overwrite=True)(lambda: get("tanh"))
    assert get("relu").name == "tanh"


@pytest.mark.parametrize("name", [5, "", "1abc", "has space", None, "a.b"])
def test_bad_names_are_refused(name):
    with pytest.raises(InvalidInputError, match="letters, digits and underscores"):
        register(name)


def test_names_are_normalized_as_get_reads_them():
    register("My-Tanh")(lambda: modify(get("tanh"), dilation=2.0))
    assert "my_tanh" in names() and "My-Tanh" not in names()
    assert get("My-Tanh").label == get("my_tanh").label == modify(get("tanh"),
                                                                  dilation=2.0).label


@pytest.mark.parametrize("factory, fragment", [
    (5, "factory function"),
    (lambda: "tanh", "returning an nngauge Activation"),
])
def test_what_is_registered_must_build_an_activation(factory, fragment):
    with pytest.raises(InvalidInputError, match=fragment):
        register("custom_act")(factory)
    assert "custom_act" not in names()


def test_overwrite_must_be_a_flag():
    with pytest.raises(InvalidInputError, match="overwrite True or False"):
        register("fresh_name", overwrite="yes")


def test_get_and_register_declare_their_arguments():
    with pytest.raises(InvalidInputError, match="get\\(\\) expected name an activation name"):
        get(3)
    with pytest.raises(InvalidInputError, match="register\\(\\) expected name a name of letters"):
        register("")

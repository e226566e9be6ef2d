"""Activation specs: text <-> Activation, round trips through ``label``, readable errors."""

import numpy as np
import pytest

from nngauge.activations import from_spec, get, modify, normalize
from nngauge.errors import InvalidInputError, UnknownNameError

X = np.linspace(-3, 3, 41)


@pytest.mark.parametrize("spec", [
    "relu",
    "leaky_relu(negative_slope=0.2)",
    "leaky_relu:negative_slope=0.2",
    "normalize(modify(tanh, dilation=1.2))",
    "debias(unit_scale(modify(selu, scale=1.1, shift=0.3)))",
    "norm_relu(b=-0.5)",
])
def test_label_round_trip(spec):
    act = from_spec(spec)
    again = from_spec(act.label)
    assert again.label == act.label
    np.testing.assert_array_equal(again(X), act(X))


def test_spec_equals_the_python_composition():
    built = normalize(modify(get("tanh"), dilation=1.2))
    np.testing.assert_allclose(from_spec("normalize(modify(tanh, dilation=1.2))")(X), built(X),
                               rtol=0, atol=0)


@pytest.mark.parametrize("spec, error", [
    ("", InvalidInputError),
    ("relu(", InvalidInputError),
    ("modify(relu, scale='big')", InvalidInputError),
    ("modify(relu, tanh)", InvalidInputError),
    ("leaky_relu(0.2)", InvalidInputError),
    ("os.system('x')", InvalidInputError),
    ("nope", UnknownNameError),
])
def test_bad_specs_say_what_to_write(spec, error):
    with pytest.raises(error) as raised:
        from_spec(spec)
    assert "Fix" in str(raised.value) or "known" in str(raised.value).lower()

"""memory.init with `.npy` files (`trnsim.inputs.npy`): ml_dtypes' raw records read as the
declared type, no pickles, and integer tensors refusing values a cast would change."""

import ml_dtypes
import numpy as np
import pytest

from trnsim.dtypes import dtype
from trnsim.errors import TrnsimError
from trnsim.memory.init import initial_values

RNG = np.random.default_rng(0)


def values(path, name: str, shape=(2, 3)):
    return initial_values(("file", str(path)), shape, dtype(name), RNG, "t.yaml:3: tensors.x")


def test_bf16_and_fp8_records_are_read_as_the_declared_type(tmp_path):
    b = np.array([[1.5, -2, 3], [0.1, 1e30, -0.0]], dtype=ml_dtypes.bfloat16)
    np.save(tmp_path / "b.npy", b)
    assert np.load(tmp_path / "b.npy").dtype == np.dtype("V2")  # what numpy writes
    got = values(tmp_path / "b.npy", "bfloat16")
    assert got.dtype == ml_dtypes.bfloat16 and got.tobytes() == b.tobytes()
    for name in ("float8_e4m3", "float8_e4m3fn", "float8_e5m2"):
        f = np.array([[1, 2, 3], [-4, 0.5, 0]], dtype=dtype(name).np)
        np.save(tmp_path / "f.npy", f)
        assert values(tmp_path / "f.npy", name).tobytes() == f.tobytes()


@pytest.mark.parametrize(
    "make, name, message",
    [
        (
            lambda p: np.save(p, np.zeros((2, 3), ml_dtypes.bfloat16)),
            "float16",
            "holds raw 2-byte records (how numpy saves ml_dtypes bfloat16), which cannot be read "
            "as float16; expected the tensor declared bfloat16, or a file of numbers",
        ),
        (
            lambda p: np.save(p, np.zeros((2, 3), "V4")),
            "float32",
            "holds raw 4-byte records; expected numbers to convert to float32",
        ),
        (
            lambda p: np.save(p, np.array([["a"] * 3] * 2, dtype=object), allow_pickle=True),
            "float32",
            "holds Python objects (a pickle), which trnsim never unpickles; expected a .npy file "
            "of numbers",
        ),
        (
            lambda p: p.write_text("1 2 3\n4 5 6\n"),
            "float32",
            "not a .npy file (it does not start with numpy's header: a text file?)",
        ),
        (
            lambda p: np.save(p, np.array([[0, 1, 2], [3, np.inf, 5]])),
            "int16",
            "holds inf at element 4, which int16 cannot hold; expected finite values",
        ),
        (
            lambda p: np.save(p, np.array([[0, 1, 2], [3, 4, -1]])),
            "uint8",
            "holds -1 at element 5, outside uint8's range; expected values from 0 to 255",
        ),
        (
            lambda p: np.save(p, np.zeros((3, 2))),
            "float32",
            "has shape [3, 2]; expected shape [2, 3]",
        ),
    ],
)
def test_files_a_tensor_cannot_take(tmp_path, make, name, message):
    path = tmp_path / "x.npy"
    make(path)
    with pytest.raises(TrnsimError) as e:
        values(path, name)
    assert str(e.value).startswith(f"t.yaml:3: tensors.x: {path}: {message}")


def test_integer_files_that_fit_are_taken_as_they_are(tmp_path):
    np.save(tmp_path / "x.npy", np.array([[0, 1, 2], [3, 4, 255]], np.int64))
    assert values(tmp_path / "x.npy", "uint8").tolist() == [[0, 1, 2], [3, 4, 255]]
    np.save(tmp_path / "y.npy", np.array([[0, 1, 2], [3, 4, -5]], np.int8))
    assert values(tmp_path / "y.npy", "int32").tolist() == [[0, 1, 2], [3, 4, -5]]

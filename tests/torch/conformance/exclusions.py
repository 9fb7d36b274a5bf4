"""The op_db entries the conformance suite does not run, each with why: the one list of them.
Everything else runs; what fails is in known_failures.py, not here."""

_JITERATOR = "CUDA-only jiterator op: it compiles a CUDA kernel at run time, no CPU kernel"
_NO_CPU = "no CPU kernel (op_db lists no CPU dtype): nothing to compare with"
_SPARSE = (
    "sparse layouts are out of scope: the shim registers dense (strided) kernels only, "
    "no Sparse/SparseCsr neuron backend"
)

EXCLUSIONS: dict[str, str] = {
    "jiterator_unary": _JITERATOR,
    "jiterator_binary": _JITERATOR,
    "jiterator_4inputs_with_extra_args": _JITERATOR,
    "jiterator_binary_return_by_ref": _JITERATOR,
    "jiterator_2inputs_2outputs": _JITERATOR,
    "torch.ops.aten._flash_attention_forward": _NO_CPU,
    "torch.ops.aten._efficient_attention_forward": _NO_CPU,
    "nn.functional.batch_norm.without_cudnn": _NO_CPU,
    "to_sparse": _SPARSE,
    "sparse.sampled_addmm": _SPARSE,
    "sparse.mm.reduce": _SPARSE,
}

# Not excluded, but these arguments (positions in (input, *args)) stay on CPU: PyTorch reads
# them on the host and requires a CPU tensor on every device, CUDA's too.
ON_CPU: dict[str, tuple[int, ...]] = {"tensor_split": (1,)}  # indices_or_sections

# Not excluded but compared by shape, dtype and layout only: their values are uninitialised
# memory, different on every run of CPU alone.
UNINITIALISED: frozenset[str] = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)

# The entries that draw random numbers (informational: every sample's two runs start from the
# same torch.manual_seed, and the device draws from the CPU generator, so they compare exactly).
RANDOM: frozenset[str] = frozenset(
    {
        "bernoulli",
        "cauchy",
        "exponential",
        "geometric",
        "log_normal",
        "multinomial",
        "normal",
        "normal.in_place",
        "normal.number_mean",
        "uniform",
        "rand_like",
        "randint",
        "randint_like",
        "randn",
        "randn_like",
        "nn.functional.dropout",
        "nn.functional.dropout2d",
        "nn.functional.dropout3d",
        "nn.functional.alpha_dropout",
        "nn.functional.feature_alpha_dropout.with_train",
    }
)

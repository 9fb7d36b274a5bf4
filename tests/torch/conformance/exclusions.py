"""The op_db entries the conformance suite does not run, each with why: the one list of them
(a key is an entry, or an entry and one of its phases). Everything else runs; what fails is in
known_failures.py, not here."""

_JITERATOR = "CUDA-only jiterator op: it compiles a CUDA kernel at run time, no CPU kernel"
_NO_CPU = "no CPU kernel (op_db lists no CPU dtype): nothing to compare with"
_SPARSE = (
    "sparse layouts are out of scope: the shim registers dense (strided) kernels only, "
    "no Sparse/SparseCsr neuron backend"
)
_LCE = (
    "PyTorch picks the chunked path's accumulation dtype per device type: float32 for "
    "bfloat16 input on CPU and CUDA, bfloat16 on any other device (LinearCrossEntropyOptions"
    "._resolve_auto_acc_dtype), so values differ by design"
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
    "nn.functional.linear_cross_entropy.chunked forward_bfloat16": _LCE,
    "nn.functional.linear_cross_entropy.chunked_none forward_bfloat16": _LCE,
}

# Not excluded, but these arguments (positions in (input, *args)) stay on CPU: PyTorch reads
# them on the host and requires a CPU tensor on every device, CUDA's too.
ON_CPU: dict[str, tuple[int, ...]] = {"tensor_split": (1,)}  # indices_or_sections

# Not excluded but compared by shape, dtype and layout only: their values are uninitialised
# memory, different on every run of CPU alone.
UNINITIALISED: frozenset[str] = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)

# The entries that draw random numbers: compared like the others (each sample's two runs start
# from the same seed of the CPU generator, which the device draws from); survey.py counts them.
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
        "nn.functional.rrelu",
        "nn.functional.fractional_max_pool2d",
        "nn.functional.fractional_max_pool3d",
    }
)

# Not excluded but compared within a multiple of PyTorch's default tolerances for the dtype, each
# with why: differences of float rounding that the device cannot remove, not of meaning.
LOOSER: dict[str, tuple[float, str]] = {
    "nn.functional.scaled_dot_product_attention": (
        20.0,
        "CPU runs its fused flash-attention kernel; a device defined in Python gets the math "
        "path (softmax(QK^T/sqrt(d))V, as any device without a fused kernel): equal to CPU's "
        "math path bit for bit, up to 2e-5 from its fused kernel in float32 and 1-2 ulps in bfloat16 "
        "(the fused kernel accumulates in float32)",
    ),
}

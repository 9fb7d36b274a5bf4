"""What the conformance suite finds failing today, per entry and phase: each test here is a
strict xfail (fixing the op makes it fail, telling you to remove its line). Written by
`python -m tests.torch.conformance.survey`; the line is the first failing sample's error."""

# fmt: off
KNOWN_FAILURES: dict[str, dict[str, str]] = {
    'nn.functional.scaled_dot_product_attention': {
        'forward_bfloat16': 'sample 24: values differ: Mismatch: Tensor-likes are not close!; Mismatched elements: 1 / 384 (0.3%)',
    },
}
# fmt: on

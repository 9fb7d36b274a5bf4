"""What the conformance suite finds failing today, per entry and phase: each test here is a
strict xfail (fixing the op makes it fail, telling you to remove its line). Written by
`python -m tests.torch.conformance.survey`; the line is the first failing sample's error."""

# fmt: off
KNOWN_FAILURES: dict[str, dict[str, str]] = {
    'constant_pad_nd': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'diff': {
        'backward_float32': 'sample 63: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.eig': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.eigh': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.eigvals': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.slogdet': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.svd': {
        'backward_float32': 'sample 2: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'logdet': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'masked.cumprod': {
        'backward_float32': 'sample 12: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 12: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 12: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'masked.cumsum': {
        'backward_float32': 'sample 12: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 12: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 12: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'masked.log_softmax': {
        'backward_float32': 'sample 18: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 18: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 18: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'masked.softmax': {
        'backward_float32': 'sample 18: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 18: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 18: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'masked.softmin': {
        'backward_float32': 'sample 18: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 18: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 18: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'narrow': {
        'backward_float32': 'sample 6: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'narrow_copy': {
        'backward_float32': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'nn.functional.batch_norm': {
        'backward_float32': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'nn.functional.pad.constant': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'nn.functional.scaled_dot_product_attention': {
        'backward_float32': 'sample 8: values differ: Mismatch: output 0: Tensor-likes are not close!; Mismatched elements: 3 / 384 (0.8%)',
        'forward_bfloat16': 'sample 13: values differ: Mismatch: Tensor-likes are not close!; Mismatched elements: 1 / 384 (0.3%)',
        'forward_float32': 'sample 12: values differ: Mismatch: Tensor-likes are not close!; Mismatched elements: 3 / 384 (0.8%)',
    },
    'put': {
        'backward_float32': 'sample 20: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 20: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 20: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'repeat': {
        'backward_float32': 'sample 9: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'sgn': {
        'backward_float32': 'sample 0 of 1: crash: the worker died (SIGSEGV)',
    },
    'svd': {
        'backward_float32': 'sample 2: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'tile': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
}
# fmt: on

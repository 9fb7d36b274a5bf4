"""What the conformance suite finds failing today, per entry and phase: each test here is a
strict xfail (fixing the op makes it fail, telling you to remove its line). Written by
`python -m tests.torch.conformance.survey`; the line is the first failing sample's error."""

# fmt: off
KNOWN_FAILURES: dict[str, dict[str, str]] = {
    '__radd__': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    '__rand__': {
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    '__rdiv__': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    '__rmatmul__': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    '__rmod__': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    '__rmul__': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    '__ror__': {
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    '__rpow__': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    '__rsub__': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    '__rxor__': {
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'add': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'addmm': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'addmm.decomposed': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'atan2': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'bitwise_and': {
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'bitwise_left_shift': {
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'bitwise_or': {
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'bitwise_right_shift': {
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'bitwise_xor': {
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'cat': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'cdist': {
        'backward_float32': 'sample 8: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 12: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'cholesky': {
        'backward_float32': 'sample 2: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'cholesky_inverse': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'cholesky_solve': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 3: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'clamp_max': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'clamp_min': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'complex': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'constant_pad_nd': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'copysign': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'cumprod': {
        'backward_float32': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'diff': {
        'backward_float32': 'sample 63: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 63: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 63: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'div.floor_rounding': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'div.no_rounding_mode': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'div.trunc_rounding': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'eq': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'float_power': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'floor_divide': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'fmax': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'fmin': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'fmod': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'gather': {
        'backward_float32': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'gcd': {
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'ge': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'gt': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'heaviside': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'hypot': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'igamma': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'igammac': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'isclose': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'lcm': {
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'ldexp': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'le': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'linalg.cholesky': {
        'backward_float32': 'sample 2: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.cholesky_ex': {
        'backward_float32': 'sample 2: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.det': {
        'backward_float32': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
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
    'linalg.eigvalsh': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.householder_product': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.inv': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.inv_ex': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.lstsq': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.lstsq.grad_oriented': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.lu': {
        'backward_float32': 'sample 15: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'linalg.lu_factor': {
        'backward_float32': 'sample 15: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'linalg.lu_factor_ex': {
        'backward_float32': 'sample 15: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'linalg.lu_solve': {
        'backward_float32': 'sample 24: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.multi_dot': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.norm': {
        'backward_float32': 'sample 26: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 66: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.norm.subgradients_at_zero': {
        'backward_float32': 'sample 24: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 55: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.pinv': {
        'backward_float32': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.pinv.hermitian': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.pinv.singular': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.qr': {
        'backward_float32': 'sample 2: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.slogdet': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.solve': {
        'backward_float32': 'sample 4: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 4: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'linalg.solve_ex': {
        'backward_float32': 'sample 4: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 4: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'linalg.solve_triangular': {
        'backward_float32': 'sample 48: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 96: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'linalg.svd': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.svdvals': {
        'backward_float32': 'sample 2: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'linalg.vecdot': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 8: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 8: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'log_softmax': {
        'backward_float32': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'logaddexp': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'logdet': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'logical_and': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'logical_or': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'logical_xor': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'lt': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'lu_solve': {
        'backward_float32': 'sample 6: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'lu_unpack': {
        'backward_float32': 'sample 15: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'masked.cumprod': {
        'backward_float32': 'sample 10: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 10: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 10: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'masked.cumsum': {
        'backward_float32': 'sample 10: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 10: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 10: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'masked.log_softmax': {
        'backward_float32': 'sample 15: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 15: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 15: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'masked.softmax': {
        'backward_float32': 'sample 15: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 15: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 15: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'masked.softmin': {
        'backward_float32': 'sample 15: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 15: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 15: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'matmul': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'max.binary': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'maximum': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'min.binary': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'minimum': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'mm': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 2: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 2: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'mul': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'narrow': {
        'backward_float32': 'sample 6: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'narrow_copy': {
        'backward_float32': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'native_group_norm': {
        'backward_float32': 'sample 12: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'ne': {
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'nextafter': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'nn.functional.adaptive_avg_pool1d': {
        'backward_float32': 'sample 0: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'nn.functional.adaptive_avg_pool3d': {
        'backward_float32': 'sample 0: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'nn.functional.avg_pool1d': {
        'backward_float32': 'sample 4: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'nn.functional.avg_pool3d': {
        'backward_float32': 'sample 7: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'nn.functional.batch_norm': {
        'backward_float32': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 3: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'nn.functional.fractional_max_pool3d': {
        'backward_float32': 'sample 42: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'nn.functional.glu': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'nn.functional.linear': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'nn.functional.linear_cross_entropy.chunked': {
        'forward_bfloat16': 'sample 115: values differ: Mismatch: Scalars are not close!; Expected 0.1298828125 but got 0.138671875.',
    },
    'nn.functional.linear_cross_entropy.chunked_none': {
        'forward_bfloat16': 'sample 1: values differ: Mismatch: Tensor-likes are not close!; Mismatched elements: 1 / 8 (12.5%)',
    },
    'nn.functional.pad.constant': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'nn.functional.pad.reflect': {
        'backward_float32': 'sample 2: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'nn.functional.pad.replicate': {
        'backward_float32': 'sample 2: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'nn.functional.pdist': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'nn.functional.pixel_shuffle': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'nn.functional.pixel_unshuffle': {
        'backward_float32': 'sample 4: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'nn.functional.scaled_dot_product_attention': {
        'backward_float32': 'sample 8: values differ: Mismatch: output 0: Tensor-likes are not close!; Mismatched elements: 5 / 384 (1.3%)',
        'forward_bfloat16': 'sample 9: values differ: Mismatch: Tensor-likes are not close!; Mismatched elements: 1 / 384 (0.3%)',
        'forward_float32': 'sample 9: values differ: Mismatch: Tensor-likes are not close!; Mismatched elements: 2 / 384 (0.5%)',
    },
    'nn.functional.softmin': {
        'backward_float32': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'nn.functional.softmin.with_dtype': {
        'backward_float32': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'ormqr': {
        'backward_float32': 'sample 8: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'pinverse': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'polar': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'pow': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'prod': {
        'backward_float32': 'sample 10: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'put': {
        'backward_float32': 'sample 20: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 20: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 20: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'qr': {
        'backward_float32': 'sample 2: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'remainder': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'repeat': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'roll': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'rsub': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'searchsorted': {
        'forward_bfloat16': 'sample 192: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 192: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'sgn': {
        'backward_float32': 'sample 0 of 1: crash: the worker died (SIGSEGV)',
    },
    'softmax': {
        'backward_float32': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 5: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'sort': {
        'backward_float32': 'sample 52: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'special.chebyshev_polynomial_t': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.chebyshev_polynomial_u': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.chebyshev_polynomial_v': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.chebyshev_polynomial_w': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.hermite_polynomial_h': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.hermite_polynomial_he': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.laguerre_polynomial_l': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.legendre_polynomial_p': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.shifted_chebyshev_polynomial_t': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.shifted_chebyshev_polynomial_u': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.shifted_chebyshev_polynomial_v': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.shifted_chebyshev_polynomial_w': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.xlog1py': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'special.zeta': {
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_int64': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'stack': {
        'backward_float32': 'sample 6: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 6: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 6: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'sub': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'svd': {
        'backward_float32': 'sample 0: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'take': {
        'backward_float32': 'sample 6: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'take_along_dim': {
        'backward_float32': "sample 0: neuron raised: RuntimeError: aten::remainder() Expected a value of type 'Tensor' for argument 'other' but instead found type 'int'.",
        'forward_bfloat16': "sample 0: neuron raised: RuntimeError: aten::remainder() Expected a value of type 'Tensor' for argument 'other' but instead found type 'int'.",
        'forward_float32': "sample 0: neuron raised: RuntimeError: aten::remainder() Expected a value of type 'Tensor' for argument 'other' but instead found type 'int'.",
    },
    'tile': {
        'backward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_bfloat16': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
        'forward_float32': 'sample 1: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'triangular_solve': {
        'backward_float32': 'sample 2: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 2: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'true_divide': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
    'unflatten': {
        'backward_float32': 'sample 8: neuron raised: ZeroDivisionError: integer division or modulo by zero',
    },
    'xlogy': {
        'backward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_bfloat16': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
        'forward_float32': 'sample 8: neuron raised: IndexError: index 0 is out of bounds for dimension 0 with size 0',
    },
}
# fmt: on

"""A NeuronCore: `plan` turns a kernel into bound, checked, costed per-queue instruction lists;
`run` runs them as in-order SimPy processes and reports deadlocks."""

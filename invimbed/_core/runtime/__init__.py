"""What the core needs at run time: the backend registry, the array namespace, fixed-order sums,
user functions at per-row times, and whether a compiled kernel is ready.
"""

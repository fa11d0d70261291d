"""The setup stage: the user's arguments to a solver read once into a `Setup`, the object every
later stage (the sweep, the reference, the backends) reads.
"""

"""The inputs stage: the user's arguments read once into a `Setup`, every check of them, and the
diagnosis of a user function's first call.
"""

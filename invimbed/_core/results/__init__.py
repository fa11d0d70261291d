"""The results stage: the `Status` codes, the result objects and every failure message.
"""

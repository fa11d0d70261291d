"""The sweep stage: the imbedding sweep of every depth (the paper's Algorithm 1), its order loop,
accuracy verdict, exact fallback, memory budget, dense output and result assembly.
"""

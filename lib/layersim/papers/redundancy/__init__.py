"""The redundancy paper's protocols (Block Redundancy, Redundant Blocks Approximation): the models and
inputs per scale, the RBA experiments.
"""

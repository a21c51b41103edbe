"""Offline assets (their registry, where each may lie, the checked cache, fetching and loading), image and text
data sets (any by name), count checks and class-balanced subsets, the training augmentation, text tasks,
distribution shifts, synthetic data, fixed features, labelled image subsets.
"""

"""Offline assets (their registry, where each may lie, the checked cache, fetching and loading), data sets, text
tasks, distribution shifts, synthetic data, fixed features, labelled image subsets.
"""

"""Offline assets (registry models and data), data sets, text tasks, distribution shifts, synthetic data, fixed
features, labelled image subsets.
"""

"""Offline assets (registry models and data), data sets, text tasks, distribution shifts.
"""

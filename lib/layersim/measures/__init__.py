"""Pure array maths on representations: the input core (``arrays``), similarity (CKA, cosine),
alignment, redundancy, neural collapse, block structure, trends, probes.
"""

"""The clusters paper's protocols (block-diagonal CKA structure of fine-tuned encoders, truncation,
layer skipping).
"""

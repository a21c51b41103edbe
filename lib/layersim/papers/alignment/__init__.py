"""The alignment paper's protocols (alignment of top singular vectors with the labels, transfer):
sweeps, layer-wise alignment, pretraining and transfer, peaks, text.
"""

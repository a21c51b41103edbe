"""The tracing paper's protocols (sample-wise cosine vs CKA, logit lens, aligned training, early exit):
a small language model, the CLIP and LLM readouts, early-exit sweeps.
"""

"""Any model, one way in: the adapters, reading every layer (``models``), readouts and logit lenses,
surgery (truncate, skip, replace), parameter counts, linear block maps, generation, the alignment paper's CNNs.
"""

"""Where things are written and how they are named: paths, protected writers, escaped markup, the
machine's facts; where tensors run and in what float32 precision (``device``).
"""

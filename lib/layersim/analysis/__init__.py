"""Every lens on any model: the lens registry, one pass that reads every layer, and ``analyze``'s report (its
arrays, figures, HTML page and plain dict).
"""

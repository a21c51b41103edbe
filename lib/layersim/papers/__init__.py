"""The four papers' protocols, one subpackage each. Nothing outside ``layersim.papers`` imports them.
"""

"""What notebook cells call: settings and presets, results and claims, plotting.
"""

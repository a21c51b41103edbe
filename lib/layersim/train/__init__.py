"""Models trained here: the one epoch loop and the step loop (``training``), the checkpoint store,
objectives, small networks, classifier heads, text fine-tuning, linear models on fixed features, CNN transfer learning.
"""

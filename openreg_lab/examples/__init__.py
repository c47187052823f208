"""Example models and scripts.

* ``openreg_lab.examples.models``: small ``torch.nn`` models for the demo, the tests and the benchmarks
  (an MLP, a transformer block, and tiny ResNet, ConvNeXt, ViT and diffusers UNet with their batches);
* ``python -m openreg_lab.examples.train_lm``: train a tiny GPT-style language model on openreg
  (``openreg-lab run -m openreg_lab.examples.train_lm`` traces it and reports what fell back).
"""

"""JAX and PyTorch get the contract through their own knobs, as TensorFlow gets ``tf.config``.

``roles`` decides whether a framework runs the model or came along with another;
``nvml`` reads the GPUs and their memory without initialising CUDA; ``budget`` holds what
JAX's and PyTorch's plans share; ``jaxplan`` and ``torchplan`` turn settings into each
framework's environment and calls; ``apply`` carries them out at the framework's import.
"""

NAMES = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}

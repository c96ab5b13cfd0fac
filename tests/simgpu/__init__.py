"""Tests on a simulated GPU: a PluggableDevice plugin driving TensorFlow's real GPU code."""

"""``tfboot selftest``: check each GPU row of the contract on this node, each in a fresh process.

``runner`` probes the node and runs the rows; ``rows`` says what each row sets and how it
is judged; ``child`` is the process a row runs in; ``tflog`` reads TensorFlow's own log of
devices and allocator regions; ``render`` prints the result. Exit status: 0 when every
row passed or was skipped, 1 when one failed (or TensorFlow could not start), 3 when
TensorFlow lists no GPU.
"""

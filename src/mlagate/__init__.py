"""mlagate: validation suite and PR gate for multi-head latent attention in MLX runtimes.

Kept free of imports: workers import mlagate.worker.server inside an arm with only the stdlib and
MLX.
"""

__version__ = "0.1.0"

"""The MLX device calls shared by the worker's ops (worker side: MLX is passed in, nothing
imported)."""


def clear_cache(mx) -> None:
    """Release MLX's cached buffers (another worker may need the memory)."""
    if hasattr(mx, "clear_cache"):
        mx.clear_cache()
    elif hasattr(mx, "metal"):
        mx.metal.clear_cache()


def synchronize(mx) -> None:
    """Wait for the device to finish (timings around a step)."""
    if hasattr(mx, "synchronize"):
        mx.synchronize()

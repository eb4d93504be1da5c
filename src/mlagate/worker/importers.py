"""Import machinery for a runtime's generation and loader modules inside a worker (stdlib only).

mlx-lm's generate.py and utils.py import tokenizer, hub and image packages at the top that the
token-id loops never call: `AbsentImporter` gives placeholders for those that are not
installed. The worker's LeanImporter (mlagate.worker.probes) leaves every package init of the
arm a bare namespace: `run_init` runs one for real where a runtime module needs it
(REAL_INITS). Used by mlagate.worker.speculation.
"""

from __future__ import annotations

import importlib.abc
import importlib.util

# Packages mlx-lm's generate.py and utils.py import at the top for tokenizers, the model hub
# and image inputs (numpy: generate.py's CLI and the image processors). The token-id
# generation loops and the local loader never call them; an arm is installed without
# dependencies, so they may be absent (an offline GPU machine may lack numpy too).
ABSENT_OK = ("transformers", "huggingface_hub", "numpy")


# Subpackages whose __init__ a runtime module needs run for real (the worker's LeanImporter
# leaves every package init of the arm a bare namespace): generate.py imports
# processors.load_processor (from mlx-lm 0.32; a runtime without the package skips it).
REAL_INITS = {"generate": ("processors",)}


def run_init(package) -> None:
    """Execute a bare-namespace package's own __init__.py into it, once."""
    if getattr(package, "__mlagate_init_run__", False):
        return
    path = package.__file__
    with open(path, encoding="utf-8") as fh:
        code = compile(fh.read(), path, "exec")
    package.__mlagate_init_run__ = True
    exec(code, package.__dict__)


class AbsentImporter(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Placeholder modules for ABSENT_OK packages that are not installed.

    Appended after every real finder, so an installed package always wins. Every name taken
    from a placeholder is a class that raises ImportError when instantiated or when any of
    its methods is called (except `register`, which mlx-lm's tokenizer_utils calls at import
    and which is a no-op here): code that really needs a tokenizer fails loudly instead of
    running on a stand-in.
    """

    def __init__(self, names: tuple[str, ...] = ABSENT_OK):
        self.names = names
        self.used: set[str] = set()

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] not in self.names:
            return None
        self.used.add(name.split(".")[0])
        return importlib.util.spec_from_loader(name, self, is_package=True)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []
        module.__mlagate_absent__ = True
        module.__getattr__ = _absent_attr(module.__name__)


def _absent_attr(module_name: str):
    def __getattr__(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def refuse(*args, **kwargs):
            raise ImportError(
                f"{module_name}.{attr} is not installed in this worker (mlagate's generation "
                "loops take token ids)"
            )

        def class_attr(cls, name: str):
            if (
                name == "register"
            ):  # registering a class with an absent registry (tokenizer_utils does at import)
                return lambda *args, **kwargs: None
            if name.startswith("__"):
                raise AttributeError(name)
            return refuse

        meta = type("Absent", (type,), {"__call__": refuse, "__getattr__": class_attr})
        return meta(attr, (), {"__module__": module_name})

    return __getattr__


def runtime_root(module_name: str, package: str) -> str:
    """The runtime package a module belongs to: its dotted name up to the segment before the last
    `models` segment (`mlx_vlm.models.deepseek_v3.language` -> `mlx_vlm`,
    `pkg._vendor.mlx_lm.models.deepseek_v3` -> `pkg._vendor.mlx_lm`); without one, package."""
    parts = module_name.split(".")
    at = max((i for i, p in enumerate(parts) if p == "models" and i > 0), default=None)
    return ".".join(parts[:at]) if at is not None else package

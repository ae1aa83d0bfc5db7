# Experiment only (refdeploy issue 45, item 1; not part of the product): vLLM 0.32's V2 model runner launches
# Triton kernels, and this CPU image's Triton 3.9.0 has no CPU backend (backends: amd, nvidia), so vLLM sets
# HAS_TRITON False and the kernels are its placeholders. With TRITON_INTERPRET=1, Triton runs @triton.jit kernels
# in its interpreter on CPU tensors; a "cpu" entry in triton.backends.backends lets vLLM's check pass
# (vllm/triton_utils/importing.py: on the cpu build, HAS_TRITON where "cpu" is a backend). Loaded through
# PYTHONPATH by every Python process of the engine container that the experiment's profile starts.
import os

if os.environ.get("TRITON_INTERPRET") == "1":
    import types

    from triton.backends import backends

    class _InterpreterDriver:
        @staticmethod
        def is_active() -> bool:
            return True

    backends.setdefault("cpu", types.SimpleNamespace(driver=_InterpreterDriver, compiler=None))
